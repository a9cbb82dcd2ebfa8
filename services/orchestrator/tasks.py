"""Celery tasks of the orchestrator service; workers run `celery -A services.orchestrator.tasks worker -Q orchestrator`.

An episode is a job of the shared job model (``shared/jobs.py``): ``orchestrator.run_episode``
is a :class:`~shared.jobs.JobTask` whose message carries the episode id; the task claims the
episode's row, keeps its heartbeat and hands the claimed run to the episode runner, which
commits after every step and writes the outcome. Nothing here reads a setting or opens the
database at import.
"""

from __future__ import annotations

import threading
from typing import Any

from celery.signals import worker_init

from services.orchestrator.episode.runner import TASK_NAME, EpisodeStore, episode_queue
from shared.jobs import JobRun, JobTask
from shared.queue import make_celery

celery = make_celery("orchestrator")


@celery.task(name="orchestrator.ping")
def ping() -> str:
    """Liveness of this service's worker."""
    return "pong"


_database: Any = None
_database_lock = threading.Lock()


def worker_database() -> Any:
    """The worker's own handle on the orchestrator's database, opened (and migrated) once per
    process. A lock, not ``lru_cache``: the thread pool's first tasks call this at the same
    time, and two Alembic upgrades at once in one process clobber each other's context
    (``KeyError('script')``, the task lost and its job left ``queued``)."""
    global _database
    if _database is None:
        with _database_lock:
            if _database is None:
                from services.orchestrator.db import open_database
                from shared.settings import get_settings

                db = open_database(get_settings().database_url or "")
                db.migrate()
                _database = db
    return _database


@worker_init.connect
def _migrate_before_tasks(sender: Any = None, **_: Any) -> None:
    """Migrate once in the worker's main process before it takes a task (a prefork pool's
    children then find the tables at head); the handle is closed, each process opens its own.
    Another service's worker that imported this module is left alone."""
    if getattr(sender, "app", None) is not celery:
        return
    from services.orchestrator.db import open_database
    from shared.settings import get_settings

    db = open_database(get_settings().database_url or "")
    try:
        with _database_lock:
            db.migrate()
    finally:
        db.close()


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
