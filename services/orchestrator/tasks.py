"""Celery tasks of the orchestrator service; workers run `celery -A services.orchestrator.tasks worker -Q orchestrator`.

An episode is a job of the shared job model (``shared/jobs.py``): ``orchestrator.run_episode``
is a :class:`~shared.jobs.JobTask` whose message carries the episode id; the task claims the
episode's row, keeps its heartbeat and hands the claimed run to the episode runner, which
commits after every step and writes the outcome. Nothing here reads a setting or opens the
database at import.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from services.orchestrator.episode.runner import TASK_NAME, EpisodeStore, episode_queue
from shared.jobs import JobRun, JobTask
from shared.queue import make_celery

celery = make_celery("orchestrator")


@celery.task(name="orchestrator.ping")
def ping() -> str:
    """Liveness of this service's worker."""
    return "pong"


@lru_cache(maxsize=1)
def worker_database() -> Any:
    """The worker's own handle on the orchestrator's database, opened (and migrated) on first
    use."""
    from services.orchestrator.db import open_database
    from shared.settings import get_settings

    db = open_database(get_settings().database_url or "")
    db.migrate()
    return db


def episode_job(job: JobRun) -> None:
    """Run (or resume) one claimed episode to its end; it writes its own outcome."""
    from services.orchestrator.episode.runner import EpisodeRunner
    from services.orchestrator.episode.service import services_from_settings
    from shared.settings import get_settings

    EpisodeRunner(worker_database(), services_from_settings(get_settings()), job.id).run(job)


run_episode = celery.task(base=JobTask, name=TASK_NAME, job_store=EpisodeStore(worker_database))(
    episode_job
)


def enqueue_episode(episode_id: str) -> None:
    """Send an episode's task: the episode id is the Celery task id, as for every job."""
    run_episode.apply_async(args=[episode_id], task_id=episode_id, queue=episode_queue())


# Rollout samples (issue 22): one task per sample on the rollouts queue.
from services.orchestrator.rollouts.tasks import enqueue_with, register  # noqa: E402

run_rollout_sample = register(celery, worker_database)
enqueue_rollout_sample = enqueue_with(run_rollout_sample)
