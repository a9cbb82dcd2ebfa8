"""One job model for every service's long work: verification jobs, episodes, rollout batches.

A *job* is a SQL row; the row is the only source of truth for its status, progress and result
(Celery's ``AsyncResult`` is never read: an unknown or expired id there looks "pending"
forever). Lifecycle::

    submit() ──▶ queued ──claim──▶ running ──▶ succeeded | failed
                   │  ▲               │  ╲
                   │  └─ worker lost ─┘   ╲ cancel ──▶ cancelled
                   └──── cancel ──────────────────────▶ cancelled
    (enqueue fails ──▶ failed, code ``enqueue_failed``)

- :func:`submit` inserts the row (``queued``), commits, then enqueues the job's Celery task with
  the **job id as the task id** and ``[job_id]`` as its only argument. If the broker refuses,
  the row becomes ``failed`` (``enqueue_failed``) and :class:`EnqueueFailed` (a 503) is raised.
- :class:`JobTask`, the base of every job task, *claims* the row (``queued`` → ``running``,
  ``attempts`` + 1, an owner token), renews its heartbeat from a background thread while the
  body runs, and writes the outcome: the body's return value (inline JSON, at most
  :data:`MAX_INLINE_RESULT_BYTES`; larger results go to the object store and the body returns
  :class:`JobOutcome` with ``result_key``), or the error as ``failed`` with a code
  (:class:`JobFailed` for your own; :class:`TransientJobError` is retried in the same run with
  backoff, see :class:`JobTask`). Every write is conditional on the row still being this
  run's, so a cancelled or re-queued job is never overwritten by a late worker.
- Cancelling (``POST /jobs/{id}/cancel``) sets ``cancelled`` at once. A queued job's task then
  finds the row cancelled and does not run; a running body stops at its next
  :meth:`JobRun.progress` (or :meth:`JobRun.check`), which raises :class:`JobCancelled`.
- Worker death: tasks are ``acks_late`` + ``reject_on_worker_lost``, so a prefork child killed
  mid-job is redelivered; the new delivery takes the job over at once when the old owner's
  process is gone (same host), else after the lease. A whole worker killed (its broker message
  may never come back: kombu's SQL transport does not restore it, Redis only after its
  visibility timeout) is caught by the reaper (:func:`reap`, run by :class:`JobReaper` in the
  service): a ``running`` row whose heartbeat is older than ``K3STACK_JOB_LEASE_S`` is
  re-queued, or marked ``failed`` with code ``worker_lost`` once it has been started
  ``K3STACK_JOB_MAX_ATTEMPTS`` times. No job stays ``running`` without a live worker. (A
  ``queued`` job waits for its message; only a broker that loses messages outright can
  strand one there.)
- Clients poll with :func:`wait_for_job` (exponential backoff); over HTTP,
  :class:`shared.jobs_client.JobsClient` adds ``get_job`` / ``list_jobs`` / ``cancel_job`` /
  ``wait_job`` to any service client.

How a service adopts it (the verifier is the worked example)::

    # models.py — the table, plus a migration creating its columns (copy the verifier's
    # v0002; a test compares each migrated table with its model)
    class JobRow(JobMixin, Base):
        __tablename__ = "verifier_jobs"

    # tasks.py — bodies, bound to an app and a store by one function
    def echo_job(job: JobRun) -> dict:
        job.progress(0.5, "half way")            # raises JobCancelled once cancelled
        return {...}                              # stored inline as the result

    def register_tasks(app, store):
        return app.task(base=JobTask, name="verifier.echo", job_store=store)(echo_job)

    celery = make_celery("verifier")              # what `celery -A services.verifier.tasks` loads
    echo = register_tasks(celery, JobStore(worker_database, JobRow))   # DB opened on first use

    # app.py — the API side, in the lifespan
    app.state.jobs = JobStore(db, JobRow)
    echo = register_tasks(make_celery("verifier", settings), app.state.jobs)
    JobReaper(app.state.jobs, celery, settings.job_reaper_interval_s).start()
    routers=[service_router, jobs_router()]       # GET /jobs, GET /jobs/{id}, POST …/cancel
    submit(app.state.jobs, echo, kind="echo", payload=body.payload)     # in the create route

The package, one module per job: ``model`` (status, table mixin, views, errors), ``store``
(every state transition), ``enqueue`` (:func:`submit`), ``reaper``, ``tasks`` (:class:`JobTask`,
:class:`JobRun`) and ``router`` (the routes and :func:`wait_for_job`); every name is
re-exported here, so ``from shared.jobs import X`` is the one import to use.
"""

from __future__ import annotations

from shared.jobs.enqueue import enqueue_again, submit
from shared.jobs.model import (
    ATTEMPTS_EXHAUSTED,
    ENQUEUE_FAILED,
    FINISHED,
    MAX_INLINE_RESULT_BYTES,
    RESULT_TOO_LARGE,
    TASK_ERROR,
    WORKER_LOST,
    EnqueueFailed,
    JobCancelled,
    JobError,
    JobFailed,
    JobMixin,
    JobOutcome,
    JobPage,
    JobProgress,
    JobStatus,
    JobView,
    TransientJobError,
    log,
    utcnow,
)
from shared.jobs.reaper import JobReaper, reap
from shared.jobs.router import JobId, JobTimeout, jobs_router, wait_for_job
from shared.jobs.store import Claim, JobPolicy, JobStore, new_owner, owner_is_gone
from shared.jobs.tasks import JobRun, JobTask, heartbeats

__all__ = [
    "ATTEMPTS_EXHAUSTED",
    "Claim",
    "ENQUEUE_FAILED",
    "EnqueueFailed",
    "FINISHED",
    "JobCancelled",
    "JobError",
    "JobFailed",
    "JobId",
    "JobMixin",
    "JobOutcome",
    "JobPage",
    "JobPolicy",
    "JobProgress",
    "JobReaper",
    "JobRun",
    "JobStatus",
    "JobStore",
    "JobTask",
    "JobTimeout",
    "JobView",
    "MAX_INLINE_RESULT_BYTES",
    "RESULT_TOO_LARGE",
    "TASK_ERROR",
    "TransientJobError",
    "WORKER_LOST",
    "enqueue_again",
    "heartbeats",
    "jobs_router",
    "log",
    "new_owner",
    "owner_is_gone",
    "reap",
    "submit",
    "utcnow",
    "wait_for_job",
]
