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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from celery import Celery, Task
from fastapi import APIRouter, Path, Query, Request
from kombu.utils.url import maybe_sanitize_url
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import JSON, Float, Integer, String, Text, func, select, update
from sqlalchemy.orm import Mapped, mapped_column

from shared.db import ServiceDatabase, UTCDateTime
from shared.errors import APIError, Error, conflict, not_found
from shared.settings import Settings, get_settings

log = logging.getLogger("k3stack.jobs")

MAX_INLINE_RESULT_BYTES = 256 * 1024

# error codes a job can end with (besides the task's own JobFailed codes)
ENQUEUE_FAILED = "enqueue_failed"
WORKER_LOST = "worker_lost"
TASK_ERROR = "task_error"
RESULT_TOO_LARGE = "result_too_large"
ATTEMPTS_EXHAUSTED = "attempts_exhausted"


class JobStatus(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


FINISHED = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})


def utcnow() -> datetime:
    return datetime.now(UTC)


# --- the table ---------------------------------------------------------------------------------


class JobMixin:
    """The columns of a jobs table; a service's row class is ``class JobRow(JobMixin, Base)``."""

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    payload: Mapped[Any] = mapped_column(JSON)
    task_name: Mapped[str] = mapped_column(String(200))
    queue: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    progress_message: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[Any | None] = mapped_column(JSON, nullable=True)
    result_key: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    owner: Mapped[str | None] = mapped_column(String(200), nullable=True)


# --- the pydantic twin -------------------------------------------------------------------------


class JobProgress(BaseModel):
    fraction: float = Field(0.0, ge=0.0, le=1.0, description="Share of the work done, 0..1.")
    message: str = Field("", description="What the job is doing now, for a person.")


class JobError(BaseModel):
    code: str = Field(description=f"Machine code, e.g. `{ENQUEUE_FAILED}`, `{WORKER_LOST}`.")
    message: str = Field(description="What went wrong, for a person.")


class JobView(BaseModel):
    """A job as every service's ``/jobs`` routes show it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str
    status: JobStatus
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    heartbeat_at: datetime | None = Field(
        None, description="Last sign of life from the worker running it (or its enqueue time)."
    )
    attempts: int = Field(0, description="How many times a worker started it.")
    progress: JobProgress = Field(default_factory=JobProgress)
    result: Any | None = Field(None, description="Small results, inline (JSON).")
    result_key: str | None = Field(None, description="Object-store key of a large result.")
    error: JobError | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @classmethod
    def from_row(cls, row: JobMixin) -> JobView:
        error = None
        if row.error_code is not None:
            error = JobError(code=row.error_code, message=row.error_message or "")
        return cls(
            id=row.id,
            kind=row.kind,
            status=JobStatus(row.status),
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            heartbeat_at=row.heartbeat_at,
            attempts=row.attempts,
            progress=JobProgress(fraction=row.progress, message=row.progress_message),
            result=row.result,
            result_key=row.result_key,
            error=error,
        )


class JobPage(BaseModel):
    items: list[JobView]
    total: int = Field(description="Jobs matching the filter, over all pages.")
    limit: int
    offset: int


# --- errors and outcomes -----------------------------------------------------------------------


class EnqueueFailed(APIError):
    """The job row exists (``failed``, ``enqueue_failed``) but no worker will ever see it."""

    def __init__(self, job: JobView, message: str) -> None:
        super().__init__(503, ENQUEUE_FAILED, message)
        self.job = job


class JobCancelled(Exception):
    """Raised in a job's body when its job was cancelled (or taken over) meanwhile."""


class JobFailed(Exception):
    """Raise from a job's body to fail it with a code of your own (not retried)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TransientJobError(Exception):
    """Raise from a job's body for a failure worth retrying (with backoff, bounded)."""


@dataclass(frozen=True)
class JobOutcome:
    """What a body may return instead of a plain JSON value: a result stored elsewhere."""

    result: Any = None
    result_key: str | None = None


# --- the store: every state transition, each one conditional ---------------------------------


@dataclass(frozen=True)
class JobPolicy:
    """Timing and bounds of the recovery rules (from settings)."""

    heartbeat_s: float = 5.0
    lease_s: float = 60.0
    max_attempts: int = 3

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> JobPolicy:
        s = settings or get_settings()
        return cls(s.job_heartbeat_s, s.job_lease_s, s.job_max_attempts)


@dataclass(frozen=True)
class Claim:
    """What a worker got when it tried to start a job."""

    started: bool
    reason: str = ""
    payload: Any = None
    attempt: int = 0
    busy: bool = False  # running under an owner that may still be alive: try again later


def new_owner() -> str:
    """A token naming one run of one job: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_is_gone(owner: str | None) -> bool:
    """Whether the process behind ``owner`` certainly no longer exists (only knowable on its
    own host); an owner on another host counts as alive until its lease runs out."""
    if not owner:
        return True
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class JobStore:
    """Reads and writes one service's jobs table.

    ``database`` is the service's :class:`ServiceDatabase`, or a no-argument callable returning
    one (workers open their database on first use, not at import). ``clock`` is injectable so
    tests can move time past a lease.
    """

    def __init__(
        self,
        database: ServiceDatabase | Callable[[], ServiceDatabase],
        model: type[JobMixin],
        *,
        policy: JobPolicy | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._database = database
        self.model = model
        self._policy = policy
        self.clock = clock

    @property
    def policy(self) -> JobPolicy:
        return self._policy or JobPolicy.from_settings()

    @property
    def database(self) -> ServiceDatabase:
        db = self._database
        return db if isinstance(db, ServiceDatabase) else db()

    def _session(self):  # type: ignore[no-untyped-def]
        return self.database.session()

    # reads

    def get(self, job_id: str) -> JobView | None:
        with self._session() as s:
            row = s.get(self.model, job_id)
            return JobView.from_row(row) if row is not None else None

    def require(self, job_id: str) -> JobView:
        job = self.get(job_id)
        if job is None:
            raise not_found("job", job_id)
        return job

    def list(
        self,
        *,
        kind: str | None = None,
        statuses: list[JobStatus] | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> JobPage:
        """Newest first."""
        m = self.model
        where = []
        if kind is not None:
            where.append(m.kind == kind)
        if statuses:
            where.append(m.status.in_([str(s) for s in statuses]))
        with self._session() as s:
            total = s.scalar(select(func.count()).select_from(m).where(*where)) or 0
            rows = s.scalars(
                select(m)
                .where(*where)
                .order_by(m.created_at.desc(), m.id)
                .limit(limit)
                .offset(offset)
            ).all()
            items = [JobView.from_row(r) for r in rows]
        return JobPage(items=items, total=total, limit=limit, offset=offset)

    # API-side writes

    def create(
        self,
        *,
        kind: str,
        payload: Any,
        task_name: str,
        queue: str | None = None,
        job_id: str | None = None,
    ) -> JobView:
        now = self.clock()
        row = self.model(
            id=job_id or uuid.uuid4().hex,
            kind=kind,
            status=JobStatus.queued.value,
            payload=payload,
            task_name=task_name,
            queue=queue,
            created_at=now,
            heartbeat_at=now,
            progress=0.0,
            progress_message="queued",
            attempts=0,
        )
        with self._session() as s:
            s.add(row)
        return JobView.from_row(row)

    def _set(self, job_id: str, *conditions: Any, **values: Any) -> bool:
        """``UPDATE … WHERE id = job_id AND conditions``; whether a row changed."""
        m = self.model
        with self._session() as s:
            res = s.execute(update(m).where(m.id == job_id, *conditions).values(**values))
            return (res.rowcount or 0) > 0  # type: ignore[attr-defined]

    def mark_enqueue_failed(self, job_id: str, message: str) -> JobView:
        m = self.model
        self._set(
            job_id,
            m.status == JobStatus.queued.value,
            status=JobStatus.failed.value,
            finished_at=self.clock(),
            error_code=ENQUEUE_FAILED,
            error_message=message,
            progress_message="enqueue failed",
        )
        return self.require(job_id)

    def cancel(self, job_id: str) -> JobView:
        """Cancel a queued or running job; 404 if unknown, 409 if already finished."""
        m = self.model
        changed = self._set(
            job_id,
            m.status.in_([JobStatus.queued.value, JobStatus.running.value]),
            status=JobStatus.cancelled.value,
            finished_at=self.clock(),
            progress_message="cancelled",
        )
        job = self.require(job_id)
        if not changed:
            raise conflict(f"job {job_id!r} already finished ({job.status})", "job_finished")
        return job

    # worker-side writes

    def claim(self, job_id: str, owner: str) -> Claim:
        """Start a run of ``job_id`` as ``owner``: from ``queued``, or taking over a ``running``
        job whose owner is gone or whose lease ran out."""
        m, policy, now = self.model, self.policy, self.clock()
        with self._session() as s:
            row = s.get(m, job_id)
            if row is None:
                return Claim(False, "unknown job")
            status = JobStatus(row.status)
            if status in FINISHED:
                return Claim(False, f"already {status}")
            if status is JobStatus.running:
                stale = row.heartbeat_at is None or row.heartbeat_at < now - timedelta(
                    seconds=policy.lease_s
                )
                if not stale and not owner_is_gone(row.owner):
                    return Claim(False, f"running under {row.owner}", busy=True)
                lost = True
            else:
                lost = False
            attempts, payload = row.attempts, row.payload
            same = (
                m.id == job_id,
                m.status == row.status,
                m.attempts == attempts,
                m.owner.is_(None) if row.owner is None else m.owner == row.owner,
            )
            if attempts >= policy.max_attempts:
                code = WORKER_LOST if lost else ATTEMPTS_EXHAUSTED
                last = "stopped without finishing" if lost else "gave up"
                s.execute(
                    update(m)
                    .where(*same)
                    .values(
                        status=JobStatus.failed.value,
                        finished_at=now,
                        error_code=code,
                        error_message=f"started {attempts} times (K3STACK_JOB_MAX_ATTEMPTS="
                        f"{policy.max_attempts}); the last run {last}",
                    )
                )
                return Claim(False, code)
            res = s.execute(
                update(m)
                .where(*same)
                .values(
                    status=JobStatus.running.value,
                    owner=owner,
                    attempts=attempts + 1,
                    started_at=now,
                    heartbeat_at=now,
                    progress_message="restarted after worker loss" if lost else "started",
                    error_code=None,
                    error_message=None,
                )
            )
            if not (res.rowcount or 0):  # type: ignore[attr-defined]
                return Claim(False, "claimed by another worker", busy=True)
            return Claim(True, payload=payload, attempt=attempts + 1)

    def _mine(self, owner: str) -> tuple[Any, ...]:
        m = self.model
        return (m.status == JobStatus.running.value, m.owner == owner)

    def heartbeat(self, job_id: str, owner: str) -> bool:
        """Renew the lease; False once the job is no longer this run's (cancelled, taken over)."""
        return self._set(job_id, *self._mine(owner), heartbeat_at=self.clock())

    def report_progress(self, job_id: str, owner: str, fraction: float, message: str) -> bool:
        return self._set(
            job_id,
            *self._mine(owner),
            progress=min(1.0, max(0.0, float(fraction))),
            progress_message=message,
            heartbeat_at=self.clock(),
        )

    def succeed(self, job_id: str, owner: str, result: Any, result_key: str | None) -> bool:
        return self._set(
            job_id,
            *self._mine(owner),
            status=JobStatus.succeeded.value,
            finished_at=self.clock(),
            progress=1.0,
            progress_message="done",
            result=result,
            result_key=result_key,
        )

    def fail(self, job_id: str, owner: str, code: str, message: str) -> bool:
        return self._set(
            job_id,
            *self._mine(owner),
            status=JobStatus.failed.value,
            finished_at=self.clock(),
            error_code=code,
            error_message=message,
        )

    def note(self, job_id: str, owner: str, message: str) -> bool:
        """Change the progress message only (and renew the heartbeat)."""
        return self._set(
            job_id, *self._mine(owner), progress_message=message, heartbeat_at=self.clock()
        )

    def restart(self, job_id: str, owner: str) -> bool:
        """Count one more start of the body by the same run (a retry after a transient error)."""
        m = self.model
        return self._set(
            job_id, *self._mine(owner), attempts=m.attempts + 1, heartbeat_at=self.clock()
        )

    def still_mine(self, job_id: str, owner: str) -> bool:
        m = self.model
        with self._session() as s:
            found = s.scalar(select(m.id).where(m.id == job_id, *self._mine(owner)))
        return found is not None

    # recovery

    def expire_lost(self) -> list[JobView]:
        """Rows ``running`` past their lease: re-queue them (returned, to be enqueued again) or,
        after ``max_attempts`` starts, mark them ``failed`` (``worker_lost``)."""
        m, policy, now = self.model, self.policy, self.clock()
        cutoff = now - timedelta(seconds=policy.lease_s)
        with self._session() as s:
            stale = s.scalars(
                select(m).where(m.status == JobStatus.running.value, m.heartbeat_at < cutoff)
            ).all()
            candidates = [(r.id, r.owner, r.attempts) for r in stale]
        requeued: list[JobView] = []
        for job_id, owner, attempts in candidates:
            again = attempts < policy.max_attempts
            silent = f"no heartbeat from its worker for over {policy.lease_s:g} s"
            values: dict[str, Any] = (
                {
                    "status": JobStatus.queued.value,
                    "owner": None,
                    "heartbeat_at": now,
                    "progress_message": f"re-queued: {silent} (attempt {attempts} of "
                    f"{policy.max_attempts} lost)",
                }
                if again
                else {
                    "status": JobStatus.failed.value,
                    "finished_at": now,
                    "error_code": WORKER_LOST,
                    "error_message": f"{silent}; started {attempts} times "
                    f"(K3STACK_JOB_MAX_ATTEMPTS={policy.max_attempts})",
                }
            )
            cond = (m.status == JobStatus.running.value, m.heartbeat_at < cutoff, m.owner == owner)
            if self._set(job_id, *cond, **values) and again:
                requeued.append(self.require(job_id))
        return requeued

    def task_of(self, job_id: str) -> tuple[str, str | None]:
        with self._session() as s:
            row = s.get(self.model, job_id)
            if row is None:
                raise not_found("job", job_id)
            return row.task_name, row.queue


# --- submitting ---------------------------------------------------------------------------------


def _payload_json(payload: Any) -> Any:
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    return payload


def _enqueue_error(app: Celery, queue: str | None, job_id: str, exc: BaseException) -> str:
    broker = maybe_sanitize_url(str(app.conf.broker_url or ""))
    where = f"queue {queue!r}" if queue else "its queue"
    return (
        f"could not enqueue job {job_id} on {where} (broker {broker}): {type(exc).__name__}: {exc}"
    )


def submit(
    store: JobStore,
    task: Task,
    *,
    kind: str,
    payload: Any = None,
    queue: str | None = None,
    job_id: str | None = None,
) -> JobView:
    """Create the row, commit, enqueue ``task`` with the job id as task id; the job as it is now.

    Raises :class:`EnqueueFailed` (the row is then ``failed``, code ``enqueue_failed``) when the
    broker cannot take the message. In eager mode the job has already run when this returns.
    """
    queue = queue or task.app.conf.task_default_queue
    job = store.create(
        kind=kind, payload=_payload_json(payload), task_name=task.name, queue=queue, job_id=job_id
    )
    try:
        task.apply_async(args=[job.id], task_id=job.id, queue=queue)
    except Exception as exc:  # noqa: BLE001 - any broker failure means no worker will run it
        message = _enqueue_error(task.app, queue, job.id, exc)
        log.error("%s", message)
        raise EnqueueFailed(store.mark_enqueue_failed(job.id, message), message) from exc
    return store.require(job.id)


def enqueue_again(store: JobStore, app: Celery, job: JobView) -> None:
    """Send a re-queued job's task once more (by name: the service may not import the body)."""
    task_name, queue = store.task_of(job.id)
    try:
        app.send_task(task_name, args=[job.id], task_id=job.id, queue=queue)
    except Exception as exc:  # noqa: BLE001
        store.mark_enqueue_failed(job.id, _enqueue_error(app, queue, job.id, exc))


def reap(store: JobStore, app: Celery) -> list[JobView]:
    """One pass of the recovery rule: re-queue (and re-send) or fail jobs whose worker died."""
    requeued = store.expire_lost()
    for job in requeued:
        log.warning("job %s lost its worker; re-queued (attempt %d)", job.id, job.attempts)
        enqueue_again(store, app, job)
    return requeued


class JobReaper:
    """Runs :func:`reap` every ``interval_s`` in a daemon thread (a service's lifespan).

    A service whose recovery does more than the shared rule (the orchestrator also releases a
    finished episode's world and sandbox) overrides :meth:`reap_once`; the thread, its interval
    and its stop stay this class's.
    """

    def __init__(self, store: JobStore, app: Celery, interval_s: float) -> None:
        self.store, self.app, self.interval_s = store, app, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> JobReaper:
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._loop, name="job-reaper", daemon=True)
            self._thread.start()
        return self

    def reap_once(self) -> object:
        """One recovery pass."""
        return reap(self.store, self.app)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.reap_once()
            except Exception:  # noqa: BLE001 - a database hiccup must not end the loop
                log.exception("job reaper pass failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


# --- running ------------------------------------------------------------------------------------


@dataclass
class JobRun:
    """What a job's body receives: its input, and the way to report progress."""

    store: JobStore
    id: str
    owner: str
    payload: Any
    attempt: int
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False)

    def progress(self, fraction: float, message: str = "") -> None:
        """Record progress (also renews the heartbeat); raises :class:`JobCancelled` when the
        job was cancelled or taken over, so the body stops here.

        Each call is one UPDATE of the row (about 10 ms on a busy SQLite, ``bench/jobs.py``):
        report at the pace a person reads, not per token.
        """
        if self._stopped.is_set() or not self.store.report_progress(
            self.id, self.owner, fraction, message
        ):
            self._stopped.set()
            raise JobCancelled(self.id)

    def check(self) -> None:
        """Raise :class:`JobCancelled` if the job is no longer this run's (no write)."""
        if self._stopped.is_set() or not self.store.still_mine(self.id, self.owner):
            self._stopped.set()
            raise JobCancelled(self.id)

    def _retry_after(self, seconds: float, message: str) -> None:
        """Wait out a retry's backoff (heartbeats go on), then count the next start; raises
        :class:`JobCancelled` if the job is cancelled meanwhile."""
        if not self.store.note(self.id, self.owner, message) or self._stopped.wait(seconds):
            self._stopped.set()
            raise JobCancelled(self.id)
        if not self.store.restart(self.id, self.owner):
            self._stopped.set()
            raise JobCancelled(self.id)
        self.attempt += 1


@contextlib.contextmanager
def heartbeats(run: JobRun, every_s: float) -> Iterator[None]:
    """Renew ``run``'s heartbeat every ``every_s`` while the block runs (a daemon thread);
    once the job is no longer the run's, the run is marked stopped. :class:`JobTask` wraps
    every body in it; a service running a claimed job in-process uses it the same way."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every_s):
            try:
                if not run.store.heartbeat(run.id, run.owner):
                    run._stopped.set()
                    return
            except Exception:  # noqa: BLE001 - a missed beat is retried on the next tick
                log.warning("heartbeat of job %s failed", run.id, exc_info=True)

    thread = threading.Thread(target=beat, name=f"job-heartbeat-{run.id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=10)


def _inline_result(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, JobOutcome):
        return _payload_json(value.result), value.result_key
    return _payload_json(value), None


class JobTask(Task):
    """Base class of every job task: ``app.task(base=JobTask, name=..., job_store=store)(fun)``.

    The message's only argument is the job id; the body is called with a :class:`JobRun` and
    returns a JSON value (or a :class:`JobOutcome`). Retry policy, explicit: a body raising
    :class:`TransientJobError` runs again in the same claimed run after
    ``retry_backoff_s * 2**n`` seconds (at most ``retry_backoff_max_s``, jittered), at most
    ``max_retries`` times and never beyond ``K3STACK_JOB_MAX_ATTEMPTS`` starts. The job stays
    ``running`` (heartbeats go on) while it waits, so a worker dying then is an ordinary lost
    worker, and there is no delayed message to lose. Any other exception fails the job at
    once (code ``task_error``, or the :class:`JobFailed` code).
    """

    job_store: JobStore | None = None
    ignore_result = True  # SQL holds the outcome
    acks_late = True
    reject_on_worker_lost = True
    max_retries = 2
    retry_backoff_s = 2.0
    retry_backoff_max_s = 60.0

    def retry_countdown(self, retries: int) -> float:
        base = min(self.retry_backoff_max_s, self.retry_backoff_s * 2**retries)
        return base * random.uniform(0.5, 1.0)

    def __call__(self, job_id: str) -> None:  # type: ignore[override]
        store = self.job_store
        if store is None:
            raise RuntimeError(f"task {self.name} has no job_store")
        owner = new_owner()
        claim = store.claim(job_id, owner)
        if not claim.started:
            if claim.busy and not self.request.is_eager:
                # Another run may still be alive (this is a redelivery or a duplicate): look
                # again once its lease can have run out.
                queue = (self.request.delivery_info or {}).get("routing_key")
                self.apply_async(
                    args=[job_id], task_id=job_id, queue=queue, countdown=store.policy.lease_s
                )
            log.info("job %s not started: %s", job_id, claim.reason)
            return None
        run = JobRun(store, job_id, owner, claim.payload, claim.attempt)
        with heartbeats(run, store.policy.heartbeat_s):
            self._run(run)
        return None

    def _run(self, run: JobRun) -> None:
        store, job_id, owner = run.store, run.id, run.owner
        retries = 0
        while True:
            try:
                value = self.run(run)
                break
            except JobCancelled:
                log.info("job %s stopped: cancelled or taken over", job_id)
                return
            except TransientJobError as exc:
                if retries >= self.max_retries or run.attempt >= store.policy.max_attempts:
                    message = f"gave up after {retries} retries: {type(exc).__name__}: {exc}"
                    store.fail(job_id, owner, TASK_ERROR, message)
                    return
                countdown = self.retry_countdown(retries)
                retries += 1
                note = f"retry {retries} of {self.max_retries} in {countdown:.1f} s: {exc}"
                try:
                    run._retry_after(countdown, note)
                except JobCancelled:
                    return
            except JobFailed as exc:
                store.fail(job_id, owner, exc.code, exc.message)
                return
            except Exception as exc:  # noqa: BLE001 - recorded on the row, the worker goes on
                log.exception("job %s failed", job_id)
                store.fail(job_id, owner, TASK_ERROR, f"{type(exc).__name__}: {exc}")
                return
        result, result_key = _inline_result(value)
        try:
            size = len(json.dumps(result))
        except (TypeError, ValueError) as exc:
            store.fail(job_id, owner, TASK_ERROR, f"result is not JSON: {exc}")
            return
        if size > MAX_INLINE_RESULT_BYTES:
            store.fail(
                job_id,
                owner,
                RESULT_TOO_LARGE,
                f"inline result of {size} bytes exceeds {MAX_INLINE_RESULT_BYTES}; put it in "
                "the object store and return JobOutcome(result_key=...)",
            )
            return
        store.succeed(job_id, owner, result, result_key)


# --- the routes --------------------------------------------------------------------------------


def _app_store(request: Request) -> JobStore:
    return request.app.state.jobs


JobId = Annotated[str, Path(max_length=64, description="The job's id.")]


def jobs_router(
    store: Callable[[Request], JobStore] = _app_store, *, tags: list[str] | None = None
) -> APIRouter:
    """``GET /jobs``, ``GET /jobs/{id}``, ``POST /jobs/{id}/cancel`` over a service's jobs.

    ``store`` finds the :class:`JobStore` for a request (default ``request.app.state.jobs``).
    """
    router = APIRouter(tags=list(tags or ["jobs"]))
    missing = {404: {"model": Error, "description": "No job with this id"}}

    @router.get("/jobs", response_model=JobPage, operation_id="listJobs")
    def list_jobs(
        request: Request,
        kind: Annotated[str | None, Query(max_length=64)] = None,
        status: Annotated[list[JobStatus] | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> JobPage:
        """Jobs, newest first; filter by kind and (repeatable) status."""
        return store(request).list(kind=kind, statuses=status, limit=limit, offset=offset)

    @router.get("/jobs/{job_id}", response_model=JobView, operation_id="getJob", responses=missing)
    def get_job(job_id: JobId, request: Request) -> JobView:
        """A job's status, progress, result or error, read from SQL."""
        return store(request).require(job_id)

    @router.post(
        "/jobs/{job_id}/cancel",
        response_model=JobView,
        operation_id="cancelJob",
        responses={**missing, 409: {"model": Error, "description": "Already finished"}},
    )
    def cancel_job(job_id: JobId, request: Request) -> JobView:
        """Cancel a queued or running job: a queued one never starts, a running one stops at
        its next progress report."""
        return store(request).cancel(job_id)

    return router


# --- waiting ------------------------------------------------------------------------------------


class JobTimeout(TimeoutError):
    """:func:`wait_for_job` gave up; ``job`` is the last state seen."""

    def __init__(self, job: JobView, timeout_s: float) -> None:
        super().__init__(f"job {job.id} still {job.status} after {timeout_s:g} s")
        self.job = job


def wait_for_job(
    fetch: Callable[[], JobView],
    timeout_s: float,
    *,
    initial_s: float = 0.1,
    max_interval_s: float = 5.0,
    factor: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobView:
    """Poll ``fetch`` until the job is finished; the pause doubles from ``initial_s`` up to
    ``max_interval_s``. Raises :class:`JobTimeout` after ``timeout_s``."""
    deadline = clock() + timeout_s
    delay = initial_s
    while True:
        job = fetch()
        if job.finished:
            return job
        remaining = deadline - clock()
        if remaining <= 0:
            raise JobTimeout(job, timeout_s)
        sleep(min(delay, remaining))
        delay = min(delay * factor, max_interval_s)
