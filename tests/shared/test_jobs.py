"""The shared job model in one process: routes, state transitions, recovery rules, retries,
waiting. Tasks run eagerly here (``K3STACK_CELERY_EAGER``) or not at all; the same rules
through real worker processes are in ``test_jobs_worker.py``."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from services.verifier.models import Base, JobRow
from services.verifier.tasks import MIGRATIONS
from shared.db import ServiceDatabase
from shared.jobs import (
    ATTEMPTS_EXHAUSTED,
    ENQUEUE_FAILED,
    MAX_INLINE_RESULT_BYTES,
    RESULT_TOO_LARGE,
    TASK_ERROR,
    WORKER_LOST,
    JobCancelled,
    JobFailed,
    JobOutcome,
    JobPolicy,
    JobRun,
    JobStatus,
    JobStore,
    JobTask,
    JobTimeout,
    JobView,
    TransientJobError,
    owner_is_gone,
    submit,
    wait_for_job,
)
from shared.jobs_client import AsyncJobsClient, JobsClient
from shared.queue import make_celery
from shared.settings import get_settings, load_settings
from tests.helpers.schema import schema_diffs
from tests.helpers.servers import free_port

REPO = Path(__file__).resolve().parents[2]


class Clock:
    """A clock tests move by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def verifier(monkeypatch):
    """Start the verifier app with extra K3STACK_* settings; yields a TestClient factory."""
    clients: list[TestClient] = []

    def start(**env: str) -> TestClient:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        get_settings.cache_clear()
        from services.verifier.app import create_app

        client = TestClient(create_app())
        client.__enter__()
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def database(tmp_path):
    db = ServiceDatabase("verifier", f"sqlite:///{tmp_path / 'jobs.db'}", MIGRATIONS)
    db.migrate()
    yield db
    db.close()


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(database, clock):
    return JobStore(database, JobRow, policy=JobPolicy(lease_s=30, max_attempts=3), clock=clock)


@pytest.fixture
def eager_app():
    app = make_celery("verifier", load_settings(celery_eager=True))
    yield app
    app.close()


def _new(store: JobStore, kind: str = "echo") -> JobView:
    return store.create(kind=kind, payload={"x": 1}, task_name="verifier.echo", queue="verifier")


# --- routes ---------------------------------------------------------------------------------


def test_unknown_job_is_404_on_get_and_cancel(verifier):
    client = verifier(K3STACK_CELERY_EAGER="1")
    for resp in (client.get("/jobs/nope"), client.post("/jobs/nope/cancel")):
        assert resp.status_code == 404
        assert resp.json() == {
            "code": 404,
            "error_code": "not_found",
            "message": "job 'nope' does not exist",
        }
    assert client.get("/jobs/" + "x" * 65).status_code == 400  # longer than any id


def test_eager_echo_job_records_result_and_progress(verifier):
    client = verifier(K3STACK_CELERY_EAGER="1")
    resp = client.post("/jobs", json={"kind": "echo", "payload": {"a": 1, "steps": 3}})
    assert resp.status_code == 202, resp.text
    job = JobView.model_validate(resp.json())
    assert job.status is JobStatus.succeeded  # eager: it ran inside the request
    assert job.result["payload"] == {"a": 1, "steps": 3}
    assert job.attempts == 1 and job.error is None
    assert job.progress.fraction == 1.0
    assert job.started_at is not None and job.finished_at >= job.started_at >= job.created_at
    again = JobView.model_validate(client.get(f"/jobs/{job.id}").json())
    assert again == job
    bad = client.post("/jobs", json={"kind": "echo", "payload": {"steps": -1}})
    assert bad.status_code == 400 and "invalid echo payload" in bad.json()["message"]
    assert client.post("/jobs", json={"kind": "nope"}).status_code == 400


def test_enqueue_failure_marks_the_row_failed_with_a_clear_error(verifier):
    port = free_port()  # nothing listens there
    client = verifier(K3STACK_BROKER_URL=f"redis://127.0.0.1:{port}/0")
    resp = client.post("/jobs", json={"kind": "echo", "payload": {"a": 1}})
    assert resp.status_code == 503, resp.text
    body = resp.json()
    assert body["error_code"] == ENQUEUE_FAILED
    assert f"127.0.0.1:{port}" in body["message"] and "queue 'verifier'" in body["message"]
    page = client.get("/jobs").json()
    assert page["total"] == 1
    job = JobView.model_validate(page["items"][0])
    assert job.id in body["message"]
    assert job.status is JobStatus.failed and job.finished_at is not None
    assert job.error.code == ENQUEUE_FAILED and f":{port}" in job.error.message
    assert client.get(f"/jobs/{job.id}").json()["status"] == "failed"
    # A finished job cannot be cancelled.
    conflict = client.post(f"/jobs/{job.id}/cancel")
    assert conflict.status_code == 409 and conflict.json()["error_code"] == "job_finished"


def test_a_cancelled_queued_job_never_runs(verifier):
    client = verifier()  # embedded broker, no worker: the job waits in the queue
    job = client.post("/jobs", json={"kind": "echo", "payload": {"a": 1}}).json()
    assert job["status"] == "queued" and job["attempts"] == 0
    resp = client.post(f"/jobs/{job['id']}/cancel")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    # The message is still on the queue; when a worker gets it, the body does not run.
    echo = client.app.state.tasks.echo
    echo.apply(args=[job["id"]], task_id=job["id"])
    after = JobView.model_validate(client.get(f"/jobs/{job['id']}").json())
    assert after.status is JobStatus.cancelled
    assert after.attempts == 0 and after.started_at is None and after.result is None
    assert client.post(f"/jobs/{job['id']}/cancel").status_code == 409


def test_list_filters_by_kind_and_status_and_paginates(verifier, clock):
    client = verifier()
    store: JobStore = client.app.state.jobs
    ids = [_new(store, kind).id for kind in ("a", "a", "a", "b", "b")]
    store.cancel(ids[0])
    page = client.get("/jobs", params={"kind": "a", "limit": 2}).json()
    assert page["total"] == 3 and len(page["items"]) == 2 and page["limit"] == 2
    rest = client.get("/jobs", params={"kind": "a", "limit": 2, "offset": 2}).json()
    seen = {j["id"] for j in page["items"]} | {j["id"] for j in rest["items"]}
    assert seen == set(ids[:3])
    both = client.get("/jobs", params=[("status", "cancelled"), ("status", "queued")]).json()
    assert both["total"] == 5
    cancelled = client.get("/jobs", params={"status": "cancelled"}).json()
    assert [j["id"] for j in cancelled["items"]] == [ids[0]]
    for params in ({"limit": 0}, {"limit": 501}, {"offset": -1}, {"status": "done"}):
        resp = client.get("/jobs", params=params)
        assert resp.status_code == 400, params
    assert "status" in client.get("/jobs", params={"status": "done"}).json()["message"]


def test_progress_of_a_running_job_shows_in_get(verifier):
    client = verifier()
    store: JobStore = client.app.state.jobs
    job = _new(store)
    claim = store.claim(job.id, "elsewhere:1:a")
    assert claim.started and claim.attempt == 1 and claim.payload == {"x": 1}
    run = JobRun(store, job.id, "elsewhere:1:a", claim.payload, claim.attempt)
    run.progress(0.25, "compiling")
    seen = client.get(f"/jobs/{job.id}").json()
    assert seen["status"] == "running"
    assert seen["progress"] == {"fraction": 0.25, "message": "compiling"}


# --- state transitions ------------------------------------------------------------------------


def test_cancelling_a_running_job_stops_it_at_its_next_progress(store):
    job = _new(store)
    assert store.claim(job.id, "h:1:a").started
    run = JobRun(store, job.id, "h:1:a", {}, 1)
    run.progress(0.5, "half")
    assert store.cancel(job.id).status is JobStatus.cancelled
    with pytest.raises(JobCancelled):
        run.progress(0.6, "more")
    with pytest.raises(JobCancelled):
        run.check()
    # A late finish from that run cannot overwrite the cancellation.
    assert not store.succeed(job.id, "h:1:a", {"late": True}, None)
    assert not store.heartbeat(job.id, "h:1:a")
    final = store.require(job.id)
    assert final.status is JobStatus.cancelled and final.result is None
    assert final.progress.fraction == 0.5


def test_a_running_job_cancelled_mid_body_is_not_marked_succeeded(store, eager_app):
    def body(job: JobRun) -> dict:
        job.progress(0.1, "start")
        store.cancel(job.id)  # as if POST /jobs/{id}/cancel arrived now
        job.progress(0.2, "never recorded")
        raise AssertionError("unreachable")

    task = eager_app.task(base=JobTask, name="test.cancel_mid", job_store=store)(body)
    job = submit(store, task, kind="t")
    assert job.status is JobStatus.cancelled
    assert job.progress.fraction == 0.1 and job.attempts == 1 and job.error is None


def test_lost_worker_is_requeued_then_failed_after_max_attempts(store, clock):
    job = _new(store)
    for attempt in (1, 2, 3):
        claim = store.claim(job.id, f"elsewhere:{attempt}:x")
        assert claim.started and claim.attempt == attempt
        clock.advance(29)
        assert store.expire_lost() == []  # heartbeat still within the lease
        clock.advance(2)
        requeued = store.expire_lost()
        if attempt < 3:
            assert [j.id for j in requeued] == [job.id]
            again = store.require(job.id)
            assert again.status is JobStatus.queued and again.attempts == attempt
            assert "re-queued" in again.progress.message
        else:
            assert requeued == []
    final = store.require(job.id)
    assert final.status is JobStatus.failed and final.error.code == WORKER_LOST
    assert "K3STACK_JOB_MAX_ATTEMPTS=3" in final.error.message
    assert final.attempts == 3 and final.finished_at == clock.now


def test_heartbeats_keep_a_long_job_alive(store, clock):
    job = _new(store)
    assert store.claim(job.id, "elsewhere:1:x").started
    for _ in range(10):
        clock.advance(20)
        assert store.heartbeat(job.id, "elsewhere:1:x")
        assert store.expire_lost() == []
    assert store.require(job.id).status is JobStatus.running


def test_redelivery_takes_over_at_once_when_the_old_owner_process_is_gone(store):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    job = _new(store)
    assert store.claim(job.id, f"{host}:{dead.pid}:a").started
    # A live owner with a fresh heartbeat keeps it: the duplicate is told to come back later.
    other = _new(store)
    assert store.claim(other.id, f"{host}:{os.getppid()}:a").started
    busy = store.claim(other.id, "me:2:b")
    assert not busy.started and busy.busy
    # The dead one's job is taken over by the redelivered message, attempt 2.
    claim = store.claim(job.id, f"{host}:{os.getpid()}:b")
    assert claim.started and claim.attempt == 2
    assert store.require(job.id).progress.message == "restarted after worker loss"


def test_owner_is_gone_only_when_certain():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    assert owner_is_gone(f"{host}:{dead.pid}:x")
    assert not owner_is_gone(f"{host}:{os.getppid()}:x")
    assert not owner_is_gone(f"{host}:{os.getpid()}:x")
    assert not owner_is_gone(f"some-other-host:{dead.pid}:x")
    assert owner_is_gone(None)


def test_a_takeover_past_max_attempts_fails_worker_lost(store, clock):
    job = _new(store)
    for attempt in (1, 2, 3):
        assert store.claim(job.id, f"elsewhere:{attempt}:x").started
        clock.advance(31)
    claim = store.claim(job.id, "elsewhere:4:x")
    assert not claim.started and claim.reason == WORKER_LOST
    assert store.require(job.id).error.code == WORKER_LOST


def test_finished_jobs_are_not_claimed_again(store):
    job = _new(store)
    assert store.claim(job.id, "h:1:a").started
    assert store.succeed(job.id, "h:1:a", {"ok": True}, None)
    claim = store.claim(job.id, "h:1:b")
    assert not claim.started and not claim.busy
    assert store.require(job.id).attempts == 1
    assert not store.claim("missing", "h:1:c").started


# --- the base task ------------------------------------------------------------------------------


def test_task_errors_are_recorded_with_codes(store, eager_app):
    def boom(job: JobRun) -> None:
        raise ValueError("boom")

    def refuse(job: JobRun) -> None:
        raise JobFailed("kernel_mismatch", "outputs differ at index 3")

    def huge(job: JobRun) -> str:
        return "x" * (MAX_INLINE_RESULT_BYTES + 1)

    def elsewhere(job: JobRun) -> JobOutcome:
        return JobOutcome(result={"reward": 1.0}, result_key="verifier/results/abc.json")

    def not_json(job: JobRun) -> object:
        return {1, 2}

    outcomes = {}
    for fun in (boom, refuse, huge, elsewhere, not_json):
        task = eager_app.task(base=JobTask, name=f"test.{fun.__name__}", job_store=store)(fun)
        outcomes[fun.__name__] = submit(store, task, kind=fun.__name__)
    assert outcomes["boom"].error.code == TASK_ERROR
    assert outcomes["boom"].error.message == "ValueError: boom"
    assert outcomes["refuse"].error.code == "kernel_mismatch"
    assert outcomes["huge"].error.code == RESULT_TOO_LARGE
    assert "JobOutcome(result_key=" in outcomes["huge"].error.message
    assert outcomes["elsewhere"].status is JobStatus.succeeded
    assert outcomes["elsewhere"].result == {"reward": 1.0}
    assert outcomes["elsewhere"].result_key == "verifier/results/abc.json"
    assert outcomes["not_json"].error.code == TASK_ERROR
    assert all(j.status is JobStatus.failed for n, j in outcomes.items() if n != "elsewhere")


class QuickRetries(JobTask):
    """The base task with millisecond backoffs, so retry tests do not sleep for seconds."""

    retry_backoff_s = 0.001


def test_transient_errors_are_retried_within_the_policy(store, eager_app):
    calls: list[int] = []
    notes: list[str] = []

    def flaky(job: JobRun) -> dict:
        calls.append(job.attempt)
        notes.append(store.require(job.id).progress.message)
        if len(calls) < 3:
            raise TransientJobError("sandbox busy")
        return {"attempt": job.attempt}

    def hopeless(job: JobRun) -> None:
        raise TransientJobError("still busy")

    task = eager_app.task(base=QuickRetries, name="test.flaky", job_store=store)(flaky)
    job = submit(store, task, kind="flaky")
    assert job.status is JobStatus.succeeded and job.result == {"attempt": 3}
    assert calls == [1, 2, 3] and job.attempts == 3
    assert notes[0] == "started"
    assert re.fullmatch(r"retry 2 of 2 in [0-9.]+ s: sandbox busy", notes[2]), notes
    task = eager_app.task(base=QuickRetries, name="test.hopeless", job_store=store)(hopeless)
    job = submit(store, task, kind="hopeless")
    assert job.status is JobStatus.failed and job.attempts == 3
    assert job.error.message == "gave up after 2 retries: TransientJobError: still busy"
    assert JobTask.max_retries + 1 == JobPolicy().max_attempts  # the two bounds agree


def test_retries_never_exceed_max_attempts(database, eager_app):
    store = JobStore(database, JobRow, policy=JobPolicy(max_attempts=2))
    calls: list[int] = []

    def flaky(job: JobRun) -> None:
        calls.append(job.attempt)
        raise TransientJobError("busy")

    task = eager_app.task(base=QuickRetries, name="test.bounded", job_store=store)(flaky)
    job = submit(store, task, kind="bounded")
    assert calls == [1, 2] and job.attempts == 2
    assert job.error.message == "gave up after 1 retries: TransientJobError: busy"


def test_cancelling_during_a_retry_backoff_stops_the_job(database, eager_app):
    store = JobStore(database, JobRow, policy=JobPolicy(heartbeat_s=0.05, lease_s=30))
    calls: list[int] = []

    class SlowRetries(JobTask):
        retry_backoff_s = 30.0  # cancelled long before this runs out

    def flaky(job: JobRun) -> None:
        calls.append(job.attempt)
        threading.Timer(0.2, store.cancel, args=[job.id]).start()
        raise TransientJobError("busy")

    task = eager_app.task(base=SlowRetries, name="test.cancel_backoff", job_store=store)(flaky)
    job = submit(store, task, kind="t")
    assert job.status is JobStatus.cancelled and calls == [1] and job.attempts == 1


def test_retry_countdown_backs_off_exponentially_with_a_cap():
    task = JobTask()
    for retries, cap in ((0, 2.0), (1, 4.0), (2, 8.0), (10, 60.0)):
        delays = [task.retry_countdown(retries) for _ in range(50)]
        assert all(cap / 2 <= d <= cap for d in delays), (retries, delays)


def test_claims_beyond_max_attempts_fail_without_running(store, eager_app):
    ran = []

    def never(job: JobRun) -> None:
        ran.append(job.id)

    task = eager_app.task(base=JobTask, name="test.never", job_store=store)(never)
    job = _new(store)
    with store.database.session() as s:
        s.execute(text("UPDATE verifier_jobs SET attempts = 3 WHERE id = :i"), {"i": job.id})
    task.apply(args=[job.id], task_id=job.id)
    assert ran == []
    assert store.require(job.id).error.code == ATTEMPTS_EXHAUSTED


# --- waiting ------------------------------------------------------------------------------------


def test_wait_for_job_backs_off_until_finished_or_timeout(store):
    job = _new(store)
    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    polls = []

    def fetch() -> JobView:
        polls.append(now[0])
        if len(polls) == 8:
            store.cancel(job.id)
        return store.require(job.id)

    done = wait_for_job(
        fetch, 600, initial_s=0.1, max_interval_s=1.0, clock=lambda: now[0], sleep=sleep
    )
    assert done.status is JobStatus.cancelled
    assert sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])

    other = _new(store)
    sleeps.clear()
    with pytest.raises(JobTimeout) as err:
        wait_for_job(lambda: store.require(other.id), 3.0, clock=lambda: now[0], sleep=sleep)
    assert err.value.job.status is JobStatus.queued
    assert sum(sleeps) == pytest.approx(3.0)  # the last pause is cut to the deadline


class _NotOK(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _SyncHost(JobsClient):
    """A client in the shape of shared.clients.ServiceClient: request() raising on errors."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def request(self, method: str, path: str, **kw):  # type: ignore[no-untyped-def]
        resp = self.http.request(method, path, **kw)
        if resp.status_code >= 400:
            raise _NotOK(resp.status_code)
        return resp


class _AsyncHost(AsyncJobsClient):
    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def request(self, method: str, path: str, **kw):  # type: ignore[no-untyped-def]
        resp = await self.http.request(method, path, **kw)
        if resp.status_code >= 400:
            raise _NotOK(resp.status_code)
        return resp


def test_jobs_client_mixins_speak_the_routes(verifier):
    client = verifier()
    store: JobStore = client.app.state.jobs
    queued = _new(store, "a")
    sync = _SyncHost(client)
    assert sync.get_job(queued.id).status is JobStatus.queued
    assert [j.id for j in sync.list_jobs(kind="a", status=JobStatus.queued).items] == [queued.id]
    assert sync.list_jobs(kind="a", status=[JobStatus.failed]).total == 0
    assert sync.cancel_job(queued.id).status is JobStatus.cancelled
    assert sync.wait_job(queued.id, timeout_s=5).status is JobStatus.cancelled
    with pytest.raises(_NotOK) as err:
        sync.get_job("nope")
    assert err.value.status == 404

    other = _new(store, "b")

    async def go() -> None:
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://verifier") as http:
            host = _AsyncHost(http)
            assert (await host.get_job(other.id)).status is JobStatus.queued
            assert (await host.list_jobs(kind="b")).total == 1
            assert (await host.cancel_job(other.id)).status is JobStatus.cancelled
            assert (await host.wait_job(other.id, timeout_s=5)).status is JobStatus.cancelled

    asyncio.run(go())


def test_jobs_client_mixin_fits_the_platform_clients(verifier):
    """On the real async service client (in-process transport): typed views, and the
    service's 404 as the client's ServiceError."""
    from shared.clients import AsyncServiceClient, ServiceError

    class Verifier(AsyncJobsClient, AsyncServiceClient):
        service = "verifier"

    client = verifier(K3STACK_CELERY_EAGER="1")
    done = client.post("/jobs", json={"kind": "echo", "payload": {"n": 1}}).json()

    async def go() -> None:
        transport = httpx.ASGITransport(app=client.app)
        async with Verifier("http://verifier", transport=transport) as c:
            job = await c.wait_job(done["id"], timeout_s=30)
            assert job.status is JobStatus.succeeded and job.result["payload"] == {"n": 1}
            assert (await c.list_jobs(status=JobStatus.succeeded)).total == 1
            with pytest.raises(ServiceError) as err:
                await c.cancel_job(done["id"])
            assert (err.value.status, err.value.error_code) == (409, "job_finished")
            with pytest.raises(ServiceError) as err:
                await c.get_job("nope")
            assert err.value.status == 404

    asyncio.run(go())


# --- tables, migrations, hygiene ---------------------------------------------------------------


def _check_migrated_table_matches_model(url: str) -> None:
    db = ServiceDatabase("verifier", url, MIGRATIONS)
    try:
        db.migrate()
        assert schema_diffs(db.engine, Base.metadata) == []
        store = JobStore(db, JobRow)
        job = _new(store)
        assert store.claim(job.id, "h:1:a").started
        got = store.require(job.id)
        assert got.created_at.tzinfo is not None and got.started_at >= got.created_at
    finally:
        db.close()


def test_verifier_jobs_table_matches_its_model_on_sqlite(tmp_path):
    _check_migrated_table_matches_model(f"sqlite:///{tmp_path / 'v.db'}")


def test_verifier_jobs_table_matches_its_model_on_postgresql(pg_url):
    _check_migrated_table_matches_model(pg_url)


def test_jobs_from_before_the_job_model_are_carried_over_as_failed(tmp_path):
    db = ServiceDatabase("verifier", f"sqlite:///{tmp_path / 'old.db'}", MIGRATIONS)
    try:
        from shared.db import migrate

        migrate(db.engine, MIGRATIONS, "verifier", revision="v0001")
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO verifier_jobs (id, kind, created_at, payload) "
                    "VALUES ('old1', 'echo', '2026-01-01 00:00:00.000000', '{}')"
                )
            )
        db.migrate()
        old = JobStore(db, JobRow).require("old1")
        assert old.status is JobStatus.failed and old.error.code == "legacy"
        assert old.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    finally:
        db.close()


def test_importing_tasks_modules_has_no_side_effects(tmp_path):
    """Building the Celery apps at import reads no setting, creates no folder, patches no class."""
    data = tmp_path / "never-created"
    code = (
        "import kombu.transport.sqlalchemy as t\n"
        "before = t.Transport.polling_interval\n"
        "import services.model.tasks, services.sandbox.tasks, services.tools.tasks\n"
        "import services.orchestrator.tasks, services.verifier.tasks\n"
        "assert t.Transport.polling_interval == before, 'kombu class patched'\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env.update(
        K3STACK_DATA_DIR=str(data), K3STACK_ENV_FILE="/nonexistent/.env", PYTHONPATH=str(REPO)
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert not data.exists()


def test_queue_names_and_eager_mode_come_from_settings(monkeypatch):
    monkeypatch.setenv("K3STACK_VERIFIER__QUEUE", "verify-fast")
    monkeypatch.setenv("K3STACK_CELERY_EAGER", "true")
    settings = load_settings()
    app = make_celery("verifier", settings)
    assert app.conf.task_default_queue == "verify-fast"
    assert app.conf.task_always_eager is True
    assert make_celery("tools", settings).conf.task_default_queue == "tools"
    from shared.queue import service_queues

    kinds = [f"verify-fast.{k}" for k in settings.verifier.job_kinds]
    assert service_queues("verifier", settings) == ["verify-fast", *kinds]
