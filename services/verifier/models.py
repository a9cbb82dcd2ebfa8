"""The verifier's tables (migrations in ``migrations/versions``)."""

from __future__ import annotations

from shared.db import service_base
from shared.jobs import JobMixin

Base = service_base()


class JobRow(JobMixin, Base):
    """Verification jobs, on the shared job model (``shared/jobs.py``)."""

    __tablename__ = "verifier_jobs"
