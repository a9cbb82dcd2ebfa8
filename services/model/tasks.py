"""Celery tasks of the model service; workers run `celery -A services.model.tasks worker -Q model`."""

from __future__ import annotations

from shared.queue import make_celery

celery = make_celery("model")


@celery.task(name="model.ping")
def ping() -> str:
    """Liveness of this service's worker; the service's long jobs join this module."""
    return "pong"
