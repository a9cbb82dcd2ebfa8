"""Celery tasks of the tools service; workers run `celery -A services.tools.tasks worker -Q tools`."""

from __future__ import annotations

from shared.queue import make_celery

celery = make_celery("tools")


@celery.task(name="tools.ping")
def ping() -> str:
    """Liveness of this service's worker; the service's long jobs join this module."""
    return "pong"
