"""Celery tasks of the orchestrator service; workers run `celery -A services.orchestrator.tasks worker -Q orchestrator`."""

from __future__ import annotations

from shared.queue import make_celery

celery = make_celery("orchestrator")


@celery.task(name="orchestrator.ping")
def ping() -> str:
    """Liveness of this service's worker; the service's long jobs join this module."""
    return "pong"


@celery.task(name="orchestrator.run_episode", acks_late=True, reject_on_worker_lost=True)
def run_episode(episode_id: str) -> str:
    """Run (or resume) one episode to its end; state is committed after every step."""
    from services.orchestrator.db import open_database
    from services.orchestrator.episode.runner import EpisodeRunner
    from services.orchestrator.episode.service import services_from_settings
    from shared.settings import get_settings

    settings = get_settings()
    db = open_database(settings.database_url or "")
    try:
        db.migrate()
        EpisodeRunner(db, services_from_settings(settings), episode_id).run()
    finally:
        db.close()
    return episode_id


def enqueue_episode(episode_id: str) -> None:
    import uuid

    run_episode.apply_async(
        args=[episode_id], task_id=f"{episode_id}.{uuid.uuid4().hex[:8]}", queue="orchestrator"
    )
