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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

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


JobBody = Callable[[JobRun], dict]


def job_kinds(store: JobStore) -> dict[str, tuple[JobBody, dict[str, Any]]]:
    """The registry of verification kinds: each kind's job body and its Celery task options.
    Echo keeps Celery's default retries; a verification runs once (``max_retries=0``)."""
    from services.verifier import bodies

    def submission_body(job: JobRun) -> dict:
        return bodies.submission_job(job, store.database)

    once = {"max_retries": 0}
    return {
        "echo": (echo_job, {}),
        "kernel": (bodies.kernel_job, once),
        "web": (bodies.web_job, once),
        "submission": (submission_body, once),
        "world": (bodies.world_job, once),
        "judge": (bodies.judge_job, once),
    }


@dataclass(frozen=True)
class VerifierTasks:
    """The bound task of every kind in :func:`job_kinds`, looked up by kind."""

    by_kind: Mapping[str, Task]

    def for_kind(self, kind: str) -> Task:
        try:
            return self.by_kind[kind]
        except KeyError:
            raise KeyError(f"unknown job kind {kind!r}; known: {sorted(self.by_kind)}") from None

    @property
    def echo(self) -> Task:
        return self.by_kind["echo"]


def kind_queue(kind: str) -> str:
    """Each verification kind has its own queue, ``<verifier queue>.<kind>``."""
    return f"{get_settings().service_queue('verifier')}.{kind}"


def register_tasks(app: Celery, store: JobStore) -> VerifierTasks:
    """The verifier's job tasks on ``app``, recording into ``store``: one per registered kind,
    named ``verifier.<kind>``."""
    return VerifierTasks(
        {
            kind: app.task(base=JobTask, name=f"verifier.{kind}", job_store=store, **options)(body)
            for kind, (body, options) in job_kinds(store).items()
        }
    )


celery = make_celery("verifier")
job_store = JobStore(worker_database, JobRow)
echo = register_tasks(celery, job_store).echo
