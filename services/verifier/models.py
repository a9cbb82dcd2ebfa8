"""The verifier's tables (migrations in ``migrations/versions``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, String
from sqlalchemy.orm import Mapped, mapped_column

from shared.db import service_base
from shared.jobs import JobMixin

Base = service_base()


class JobRow(JobMixin, Base):
    """Verification jobs, on the shared job model (``shared/jobs.py``)."""

    __tablename__ = "verifier_jobs"


class SubmissionSessionRow(Base):
    """A submission-loop session; ``state`` holds the hidden seed and never leaves the service."""

    __tablename__ = "verifier_submission_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    task: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
