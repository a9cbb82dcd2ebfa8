"""Running a job: :class:`JobTask` (the base of every job task: claim, heartbeat thread, outcome,
retries) and :class:`JobRun`, the handle a body reports progress through.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import tenacity
from celery import Task

from shared.jobs.enqueue import _payload_json
from shared.jobs.model import (
    MAX_INLINE_RESULT_BYTES,
    RESULT_TOO_LARGE,
    TASK_ERROR,
    JobCancelled,
    JobFailed,
    JobOutcome,
    TransientJobError,
    log,
)
from shared.jobs.store import JobStore, new_owner

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
        try:
            claim = store.claim(job_id, owner)
        except Exception as exc:
            # The store failed, not the job (database down or restarting): the message must not
            # be spent, or the row stays ``queued`` with nothing left to run it.
            if self.request.is_eager or self.request.retries >= self.max_retries:
                raise
            log.warning("job %s: could not claim (%s); retrying", job_id, exc)
            raise self.retry(exc=exc, countdown=self.retry_countdown(self.request.retries)) from exc
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

    def retrying(self, run: JobRun) -> tenacity.Retrying:
        """The retry policy of :class:`TransientJobError`, in tenacity's terms: at most
        ``max_retries`` retries and never beyond the store's attempts limit; each wait is
        :meth:`retry_countdown` spent in :meth:`JobRun._retry_after` (heartbeats go on, a
        cancel ends it with :class:`JobCancelled`, the row counts the next start)."""
        policy = run.store.policy

        def give_up(state: tenacity.RetryCallState) -> bool:
            return state.attempt_number > self.max_retries or run.attempt >= policy.max_attempts

        def wait_out(state: tenacity.RetryCallState) -> None:
            assert state.outcome is not None
            countdown = state.upcoming_sleep
            note = (
                f"retry {state.attempt_number} of {self.max_retries} in {countdown:.1f} s: "
                f"{state.outcome.exception()}"
            )
            run._retry_after(countdown, note)

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(TransientJobError),
            stop=give_up,
            wait=lambda state: self.retry_countdown(state.attempt_number - 1),
            before_sleep=wait_out,
            sleep=lambda _seconds: None,  # wait_out has waited, watching for a cancel
            reraise=True,
        )

    def _run(self, run: JobRun) -> None:
        store, job_id, owner = run.store, run.id, run.owner
        retrying = self.retrying(run)
        try:
            value = retrying(self.run, run)
        except JobCancelled:
            log.info("job %s stopped: cancelled or taken over", job_id)
            return
        except TransientJobError as exc:
            retries = retrying.statistics.get("attempt_number", 1) - 1
            message = f"gave up after {retries} retries: {type(exc).__name__}: {exc}"
            store.fail(job_id, owner, TASK_ERROR, message)
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
