"""The episodes' job store and the names their tasks go by."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from services.orchestrator.episode.models import EpisodeRow
from shared.db import ServiceDatabase
from shared.jobs import FINISHED, JobPolicy, JobStore, utcnow
from shared.settings import Settings

TERMINAL = tuple(str(s) for s in FINISHED)
TASK_NAME = "orchestrator.run_episode"
QUEUE = "orchestrator"  # the default; K3STACK_ORCHESTRATOR__QUEUE renames it
Database = ServiceDatabase | Callable[[], ServiceDatabase]


def episode_queue(settings: Settings | None = None) -> str:
    """The Celery queue episodes are sent to: the one the orchestrator's worker consumes."""
    from shared.settings import get_settings

    return (settings or get_settings()).service_queue("orchestrator")


def now_utc() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


class EpisodeStore(JobStore):
    """The shared job store over the episodes table. Its timing is the orchestrator's own
    (``K3STACK_ORCHESTRATOR__LEASE_S``, a heartbeat every third of it) and its bound on starts
    ``K3STACK_JOB_MAX_ATTEMPTS``, read when first needed (never at import)."""

    def __init__(
        self,
        database: Database,
        settings: Settings | None = None,
        *,
        policy: JobPolicy | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(database, EpisodeRow, policy=policy, clock=clock or utcnow)
        self._settings = settings

    @property
    def policy(self) -> JobPolicy:
        if self._policy is None:
            from shared.settings import get_settings

            s = self._settings or get_settings()
            lease = s.orchestrator.lease_s
            self._policy = JobPolicy(lease / 3, lease, s.job_max_attempts)
        return self._policy
