"""A task whose store fails at the claim (the database restarting, a migration in progress) is
sent again, not spent: before, the exception acked the message and the job's row stayed
``queued`` with nothing left to run it. Driven through a real Celery worker (in-memory broker)."""

from __future__ import annotations

import threading

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.signals import task_failure, task_success
from sqlalchemy.exc import OperationalError

from services.verifier.models import JobRow
from services.verifier.tasks import MIGRATIONS
from shared.db import ServiceDatabase
from shared.jobs import JobRun, JobStore, JobTask
from shared.jobs.store import Claim

pytestmark = pytest.mark.timeout(120)


class FlakyStore(JobStore):
    """A store whose first ``failures`` claims raise what a database outage raises."""

    def __init__(self, *args, failures: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failures = failures
        self.claims = 0

    def claim(self, job_id: str, owner: str) -> Claim:
        self.claims += 1
        if self.claims <= self.failures:
            raise OperationalError("SELECT", {}, Exception("server closed the connection"))
        return super().claim(job_id, owner)


def _run(tmp_path, failures: int) -> tuple[FlakyStore, str]:
    db = ServiceDatabase("verifier", f"sqlite:///{tmp_path / 'k3.db'}", MIGRATIONS)
    db.migrate()
    store = FlakyStore(db, JobRow, failures=failures)
    app = Celery("claim-retry", broker="memory://", backend="cache+memory://")
    app.conf.task_default_queue = "claim-retry"

    def body(job: JobRun) -> dict:
        return {"attempt": job.attempt}

    task = app.task(
        base=JobTask, name=f"test.claim_retry.{failures}", job_store=store, retry_backoff_s=0.05
    )(body)
    ended = threading.Event()
    task_success.connect(lambda **_: ended.set(), sender=task, weak=False)
    task_failure.connect(lambda **_: ended.set(), sender=task, weak=False)
    job = store.create(kind="echo", payload={}, task_name=task.name)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        task.apply_async(args=[job.id], task_id=job.id)
        # The message's last delivery has ended: success, or a failure that is not a retry.
        assert ended.wait(60), f"no final delivery; claims so far: {store.claims}"
    return store, job.id


def test_a_claim_that_fails_is_retried_and_the_job_runs(tmp_path):
    store, job_id = _run(tmp_path, failures=2)
    got = store.require(job_id)
    assert got.status == "succeeded", got
    assert store.claims == 3


def test_a_store_that_keeps_failing_is_not_retried_for_ever(tmp_path):
    store, job_id = _run(tmp_path, failures=100)
    # max_retries (2) sends, then the error surfaces; the row is left for the reaper and API
    assert store.claims == JobTask.max_retries + 1
    assert store.require(job_id).status == "queued"
