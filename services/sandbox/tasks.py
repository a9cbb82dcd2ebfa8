"""Celery tasks of the sandbox service; workers run `celery -A services.sandbox.tasks worker -Q sandbox`."""

from __future__ import annotations

from shared.queue import make_celery

celery = make_celery("sandbox")


@celery.task(name="sandbox.ping")
def ping() -> str:
    """Liveness of this service's worker; the service's long jobs join this module."""
    return "pong"
