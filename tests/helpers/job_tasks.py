"""A worker app for job tests: the verifier's tasks plus ``test.gated``, a job that runs until
the test acts (no sleeps to tune). Start a worker on it with ``-A tests.helpers.job_tasks``.

``test.gated`` reports progress every 0.1 s — its message names the worker process's pid, so
a test knows whom to kill — for as long as its attempt is ``<= payload["hold_attempts"]``
(default 1); a later attempt returns at once. A held attempt ends only by cancellation or by
its process dying.
"""

from __future__ import annotations

import os
import time

from celery import Celery, Task

from services.verifier.models import JobRow
from services.verifier.tasks import register_tasks, worker_database
from shared.jobs import JobRun, JobStore, JobTask
from shared.queue import make_celery


def gated_job(job: JobRun) -> dict:
    hold = int((job.payload or {}).get("hold_attempts", 1))
    tick = 0
    while job.attempt <= hold:
        tick += 1
        job.progress(min(0.5, tick / 1000), f"pid {os.getpid()} tick {tick}")
        time.sleep(0.1)
    return {"attempt": job.attempt, "pid": os.getpid()}


def register_gated(app: Celery, store: JobStore) -> Task:
    return app.task(base=JobTask, name="test.gated", job_store=store)(gated_job)


celery = make_celery("verifier")
job_store = JobStore(worker_database, JobRow)
register_tasks(celery, job_store)
gated = register_gated(celery, job_store)
