"""The job store: every state transition of a job row (create, claim, heartbeat, progress,
succeed, fail, cancel, expire), each one conditional on the row still being this run's.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update

from shared.db import ServiceDatabase
from shared.errors import conflict, not_found
from shared.jobs.model import (
    ATTEMPTS_EXHAUSTED,
    ENQUEUE_FAILED,
    FINISHED,
    WORKER_LOST,
    JobMixin,
    JobPage,
    JobStatus,
    JobView,
    utcnow,
)
from shared.settings import Settings, get_settings

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
