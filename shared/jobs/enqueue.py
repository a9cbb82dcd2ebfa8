"""Submitting a job: insert its row, then enqueue its Celery task with the job id as task id
(a refused enqueue marks the row failed and raises a 503).
"""

from __future__ import annotations

from typing import Any

from celery import Celery, Task
from kombu.utils.url import maybe_sanitize_url
from pydantic import BaseModel

from shared.jobs.model import EnqueueFailed, JobView, log
from shared.jobs.store import JobStore

# --- submitting ---------------------------------------------------------------------------------


def _payload_json(payload: Any) -> Any:
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    return payload


def _enqueue_error(app: Celery, queue: str | None, job_id: str, exc: BaseException) -> str:
    broker = maybe_sanitize_url(str(app.conf.broker_url or ""))
    where = f"queue {queue!r}" if queue else "its queue"
    return (
        f"could not enqueue job {job_id} on {where} (broker {broker}): {type(exc).__name__}: {exc}"
    )


def submit(
    store: JobStore,
    task: Task,
    *,
    kind: str,
    payload: Any = None,
    queue: str | None = None,
    job_id: str | None = None,
) -> JobView:
    """Create the row, commit, enqueue ``task`` with the job id as task id; the job as it is now.

    Raises :class:`EnqueueFailed` (the row is then ``failed``, code ``enqueue_failed``) when the
    broker cannot take the message. In eager mode the job has already run when this returns.
    """
    queue = queue or task.app.conf.task_default_queue
    job = store.create(
        kind=kind, payload=_payload_json(payload), task_name=task.name, queue=queue, job_id=job_id
    )
    try:
        task.apply_async(args=[job.id], task_id=job.id, queue=queue)
    except Exception as exc:  # noqa: BLE001 - any broker failure means no worker will run it
        message = _enqueue_error(task.app, queue, job.id, exc)
        log.error("%s", message)
        raise EnqueueFailed(store.mark_enqueue_failed(job.id, message), message) from exc
    return store.require(job.id)


def enqueue_again(store: JobStore, app: Celery, job: JobView) -> None:
    """Send a re-queued job's task once more (by name: the service may not import the body)."""
    task_name, queue = store.task_of(job.id)
    try:
        app.send_task(task_name, args=[job.id], task_id=job.id, queue=queue)
    except Exception as exc:  # noqa: BLE001
        store.mark_enqueue_failed(job.id, _enqueue_error(app, queue, job.id, exc))
