"""Celery tasks of the verifier; workers run ``celery -A services.verifier.tasks worker -Q verifier``.

Every task here is a job (``shared/jobs.py``): its message carries the job id, its row in
``verifier_jobs`` carries the input, status, progress and result. :func:`register_tasks` binds
the bodies to a Celery app and a job store: the module-level ``celery`` app (what workers load)
gets the worker's store, which opens the database on first use; the service's API binds them
to its own app and store (``app.py``), so eager mode runs them against the API's database.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from celery import Celery, Task
from pydantic import BaseModel, ConfigDict, Field

from services.verifier.models import JobRow
from shared.db import ServiceDatabase
from shared.jobs import JobRun, JobStore, JobTask
from shared.queue import make_celery
from shared.settings import get_settings

MIGRATIONS = Path(__file__).parent / "migrations"


@lru_cache(maxsize=1)
def worker_database() -> ServiceDatabase:
    """The worker's own handle on the verifier's database, opened (and migrated) on first use."""
    db = ServiceDatabase("verifier", get_settings().database_url or "", MIGRATIONS)
    db.migrate()
    return db


class EchoInput(BaseModel):
    """Input of an ``echo`` job: any JSON object; ``steps`` × ``step_s`` make it take a while."""

    model_config = ConfigDict(extra="allow")

    steps: int = Field(0, ge=0, le=10_000, description="Progress steps to report.")
    step_s: float = Field(0.0, ge=0.0, le=60.0, description="Seconds each step takes.")


def echo_digest(payload: dict) -> str:
    return hashlib.sha256(repr(sorted(payload.items())).encode()).hexdigest()


def echo_job(job: JobRun) -> dict:
    """A round trip through the queue: the payload with its digest and the worker's time.

    Proves the broker, a worker and the job table are wired; with ``steps`` it reports
    progress (and can be cancelled) on the way. Real verification jobs (kernel, web, judges)
    come with the verifier issue.
    """
    payload = dict(job.payload or {})
    spec = EchoInput.model_validate(payload)
    for step in range(spec.steps):
        time.sleep(spec.step_s)
        job.progress((step + 1) / spec.steps, f"step {step + 1} of {spec.steps}")
    return {"payload": payload, "sha256": echo_digest(payload), "worker_time": time.time()}


@dataclass(frozen=True)
class VerifierTasks:
    echo: Task
    kernel: Task
    web: Task
    submission: Task
    world: Task
    judge: Task

    def for_kind(self, kind: str) -> Task:
        return getattr(self, kind)


def kind_queue(kind: str) -> str:
    """Each verification kind has its own queue, ``<verifier queue>.<kind>``."""
    return f"{get_settings().service_queue('verifier')}.{kind}"


def register_tasks(app: Celery, store: JobStore) -> VerifierTasks:
    """The verifier's job tasks on ``app``, recording into ``store``."""
    from services.verifier import bodies

    def task(name: str, body) -> Task:  # type: ignore[no-untyped-def]
        return app.task(base=JobTask, name=f"verifier.{name}", job_store=store, max_retries=0)(body)

    def submission_body(job: JobRun) -> dict:
        return bodies.submission_job(job, store.database)

    return VerifierTasks(
        echo=app.task(base=JobTask, name="verifier.echo", job_store=store)(echo_job),
        kernel=task("kernel", bodies.kernel_job),
        web=task("web", bodies.web_job),
        submission=task("submission", submission_body),
        world=task("world", bodies.world_job),
        judge=task("judge", bodies.judge_job),
    )


celery = make_celery("verifier")
job_store = JobStore(worker_database, JobRow)
echo = register_tasks(celery, job_store).echo
