"""Celery tasks of the orchestrator service; workers run `celery -A services.orchestrator.tasks worker -Q orchestrator`."""

from __future__ import annotations

from shared.queue import make_celery

celery = make_celery("orchestrator")


@celery.task(name="orchestrator.ping")
def ping() -> str:
    """Liveness of this service's worker; the service's long jobs join this module."""
    return "pong"
