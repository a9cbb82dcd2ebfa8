"""The job model through real Celery worker processes: progress seen through the verifier's
``GET /jobs/{id}``, cancellation of running and queued jobs, and workers SIGKILLed mid-job
(whole worker: the reaper re-queues or fails the job; pool process only: Celery redelivers it
and the new delivery takes over). Embedded mode (SQLite broker and database) and deployed mode
(Redis broker, PostgreSQL database).

Every wait is on a condition with a generous deadline; nothing depends on how fast the
machine is. Jobs that must outlive an observation are ``test.gated`` (tests/helpers/job_tasks.py),
which runs until it is cancelled or killed.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shared.jobs import WORKER_LOST, JobStatus, JobView, submit
from shared.queue import worker_argv
from shared.settings import get_settings
from tests.helpers.job_tasks import register_gated
from tests.helpers.servers import ServerProcess, spawn

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 120.0


def until(check: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.05)


class Platform:
    """The verifier API in this process (TestClient) and worker processes on one queue."""

    def __init__(self, client: TestClient, env: dict[str, str], queue: str) -> None:
        self.client = client
        self.env = env
        self.queue = queue
        self.workers: list[tuple[Any, ServerProcess]] = []

    def start_worker(self, pool: str = "solo") -> ServerProcess:
        argv = [sys.executable, *worker_argv("verifier", 1, pool=pool, queues=[self.queue])]
        argv[argv.index("services.verifier.tasks")] = "tests.helpers.job_tasks"
        cm = spawn(argv, env=self.env, cwd=REPO, ready_text=" ready.", timeout=90)
        server = cm.__enter__()
        self.workers.append((cm, server))
        return server

    def job(self, job_id: str) -> JobView:
        resp = self.client.get(f"/jobs/{job_id}")
        assert resp.status_code == 200, resp.text
        return JobView.model_validate(resp.json())

    def submit_gated(self, hold_attempts: int = 1) -> JobView:
        state = self.client.app.state
        gated = register_gated(state.celery, state.jobs)
        return submit(state.jobs, gated, kind="gated", payload={"hold_attempts": hold_attempts})

    def running_pid(self, job_id: str) -> int:
        """Wait until the job runs and reports progress; the pid of the process running it."""

        def reported() -> re.Match[str] | None:
            job = self.job(job_id)
            return job.status is JobStatus.running and re.match(
                r"pid (\d+) tick", job.progress.message
            )

        return int(until(reported, f"job {job_id} to report progress").group(1))

    def finished(self, job_id: str) -> JobView:
        return until(lambda: (j := self.job(job_id)).finished and j, f"job {job_id} to finish")


@pytest.fixture
def platform(clean_env, monkeypatch) -> Iterator[Callable[..., Platform]]:
    platforms: list[Platform] = []
    clients: list[TestClient] = []

    def start(**settings: str) -> Platform:
        queue = f"verifier-{uuid.uuid4().hex[:8]}"  # nothing left over from other tests
        settings = {"K3STACK_VERIFIER__QUEUE": queue, **settings}
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        get_settings.cache_clear()
        env = {k: v for k, v in os.environ.items()}
        env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        from services.verifier.app import create_app

        client = TestClient(create_app())
        client.__enter__()
        clients.append(client)
        p = Platform(client, env, queue)
        platforms.append(p)
        return p

    yield start
    for p in platforms:
        for cm, server in reversed(p.workers):
            cm.__exit__(None, None, None)
            assert not server.group_alive()
    for client in clients:
        client.__exit__(None, None, None)


FAST_RECOVERY = {
    "K3STACK_JOB_HEARTBEAT_S": "0.5",
    "K3STACK_JOB_LEASE_S": "5",
    "K3STACK_JOB_REAPER_INTERVAL_S": "0.5",
}


def _broker(kind: str, redis_url: str | None) -> dict[str, str]:
    if kind == "redis":
        return {"K3STACK_BROKER_URL": f"{redis_url}/0", "K3STACK_RESULT_BACKEND": f"{redis_url}/1"}
    return {}


@pytest.fixture(params=["embedded", "redis"])
def broker(request) -> dict[str, str]:
    if request.param == "redis":
        return _broker("redis", request.getfixturevalue("redis_url"))
    return {}


def _kill_group(worker: ServerProcess) -> None:
    os.killpg(worker.pgid, signal.SIGKILL)
    until(lambda: not worker.group_alive(), "the killed worker to be gone", timeout=30)


def test_progress_and_cancellation_through_a_worker(platform):
    p = platform(**FAST_RECOVERY)
    p.start_worker()
    client = p.client
    # A long echo through the verifier's own route: 10 000 steps of 50 ms.
    a = client.post("/jobs", json={"kind": "echo", "payload": {"steps": 10000, "step_s": 0.05}})
    assert a.status_code == 202 and a.json()["status"] == "queued"
    a_id = a.json()["id"]

    def step_of(job: JobView) -> int:
        m = re.fullmatch(r"step (\d+) of 10000", job.progress.message)
        return int(m.group(1)) if m else 0

    first = until(lambda: step_of(j := p.job(a_id)) and j, "the echo job's first progress")
    assert first.status is JobStatus.running and first.attempts == 1
    assert 0 < first.progress.fraction < 1
    later = until(lambda: step_of(j := p.job(a_id)) > step_of(first) and j, "more progress")
    assert later.progress.fraction > first.progress.fraction

    # A second job waits behind it (one solo worker); cancelled while queued, it never runs.
    b = client.post("/jobs", json={"kind": "echo", "payload": {"n": 2}}).json()
    assert p.job(b["id"]).status is JobStatus.queued
    assert client.post(f"/jobs/{b['id']}/cancel").json()["status"] == "cancelled"

    # Cancel the running one: it stops at its next progress report and frees the worker.
    resp = client.post(f"/jobs/{a_id}/cancel")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    c = client.post("/jobs", json={"kind": "echo", "payload": {"n": 3}}).json()
    done = p.finished(c["id"])
    assert done.status is JobStatus.succeeded and done.result["payload"] == {"n": 3}

    a_final, b_final = p.job(a_id), p.job(b["id"])
    assert a_final.status is JobStatus.cancelled and a_final.result is None
    assert a_final.progress.fraction < 1
    assert b_final.status is JobStatus.cancelled
    assert b_final.attempts == 0 and b_final.started_at is None and b_final.result is None
    log = p.workers[0][1].log()
    # The worker did consume B's message (FIFO, before C's) and returned without running it.
    assert f"verifier.echo[{b['id']}] succeeded" in log
    assert log.index(f"verifier.echo[{b['id']}]") < log.index(f"verifier.echo[{c['id']}]")
    assert client.post(f"/jobs/{a_id}/cancel").status_code == 409


def test_a_sigkilled_worker_job_is_requeued_by_the_reaper_and_completes(platform, broker):
    p = platform(**FAST_RECOVERY, **broker)
    worker = p.start_worker(pool="solo")
    job = p.submit_gated(hold_attempts=1)
    pid = p.running_pid(job.id)
    assert pid == worker.proc.pid  # solo pool: the worker process itself runs it
    _kill_group(worker)
    # No heartbeat any more: once the lease is over the reaper puts it back on the queue
    # (its broker message died with the worker, or would come back only after an hour).
    requeued = until(
        lambda: (j := p.job(job.id)).status is JobStatus.queued and j, "the reaper to re-queue"
    )
    assert requeued.attempts == 1 and "re-queued" in requeued.progress.message
    p.start_worker(pool="solo")
    done = p.finished(job.id)
    assert done.status is JobStatus.succeeded, done
    assert done.attempts == 2 and done.result["attempt"] == 2
    assert done.result["pid"] != pid


def test_deployed_mode_sigkilled_worker_job_fails_worker_lost_at_max_attempts(
    platform, redis_url, pg_url
):
    p = platform(
        **FAST_RECOVERY,
        **_broker("redis", redis_url),
        K3STACK_DATABASE_URL=pg_url,
        K3STACK_JOB_MAX_ATTEMPTS="1",
    )
    worker = p.start_worker(pool="solo")
    job = p.submit_gated(hold_attempts=5)
    p.running_pid(job.id)
    _kill_group(worker)
    final = p.finished(job.id)
    assert final.status is JobStatus.failed
    assert final.error.code == WORKER_LOST
    assert "K3STACK_JOB_MAX_ATTEMPTS=1" in final.error.message
    assert final.attempts == 1 and final.finished_at is not None


def test_a_killed_pool_process_is_redelivered_and_taken_over(platform, broker):
    # The reaper is off and the lease long: only Celery's redelivery (acks_late +
    # reject_on_worker_lost) and the claim's dead-owner check can bring it back.
    p = platform(
        **broker,
        K3STACK_JOB_HEARTBEAT_S="0.5",
        K3STACK_JOB_LEASE_S="3600",
        K3STACK_JOB_REAPER_INTERVAL_S="0",
    )
    worker = p.start_worker(pool="prefork")
    job = p.submit_gated(hold_attempts=1)
    child = p.running_pid(job.id)
    assert child != worker.proc.pid  # a pool process, not the worker's main process
    os.kill(child, signal.SIGKILL)
    done = p.finished(job.id)
    assert done.status is JobStatus.succeeded, done
    assert done.attempts == 2 and done.result["attempt"] == 2
    assert done.result["pid"] != child
    assert worker.proc.poll() is None  # the worker itself lived on
