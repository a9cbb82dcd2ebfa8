"""The job model: status and error codes, the table mixin every service's job table uses, its
pydantic twin (:class:`JobView`) and the errors and outcomes a job body can raise or return.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import JSON, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from shared.db import UTCDateTime
from shared.errors import APIError

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
