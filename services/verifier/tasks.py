"""Celery tasks of the verifier; workers run ``celery -A services.verifier.tasks worker -Q verifier``."""

from __future__ import annotations

import hashlib
import time

from shared.queue import make_celery

celery = make_celery("verifier")


@celery.task(name="verifier.echo")
def echo(payload: dict) -> dict:
    """A round trip through the queue: returns the payload with its digest and the worker's time.

    Proves the broker, a worker and the result backend are wired; real verification jobs
    (kernel, web, judges) come with the verifier issue.
    """
    digest = hashlib.sha256(repr(sorted(payload.items())).encode()).hexdigest()
    return {"payload": payload, "sha256": digest, "worker_time": time.time()}
