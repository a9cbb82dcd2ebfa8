"""Celery through a real worker process: over the embedded broker (SQLite) and over a private
Redis. The worker is started with the same command line ``k3stack up`` uses; the task is the
verifier's ``echo`` job, whose outcome is read from its SQL row (never from Celery)."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest
from kombu.exceptions import EncodeError

from services.verifier.models import JobRow
from services.verifier.tasks import MIGRATIONS, register_tasks
from shared.db import ServiceDatabase
from shared.jobs import JobStatus, JobStore, submit, wait_for_job
from shared.queue import make_celery, worker_argv
from shared.settings import load_settings
from tests.helpers.servers import ServerProcess, spawn

REPO = Path(__file__).resolve().parents[2]


def _worker_env(**settings: str) -> dict[str, str]:
    """The process environment without any K3STACK_* of the caller, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env["K3STACK_ENV_FILE"] = "/nonexistent/.env"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings)
    return env


@pytest.fixture
def start_worker():
    """Start ``services.verifier.tasks`` workers; teardown kills their process groups and
    checks that no process of them is left."""
    started: list[tuple[object, ServerProcess]] = []

    def start(env: dict[str, str]) -> ServerProcess:
        argv = [sys.executable, *worker_argv("verifier", concurrency=1, pool="solo")]
        cm = spawn(argv, env=env, cwd=REPO, ready_text=" ready.", timeout=60)
        server = cm.__enter__()
        started.append((cm, server))
        return server

    yield start
    for cm, server in reversed(started):
        cm.__exit__(None, None, None)  # stops the group; asserts it is gone
        assert not server.group_alive()
        assert server.proc.returncode is not None


def _round_trip(app, worker: ServerProcess) -> None:
    settings = load_settings()
    db = ServiceDatabase("verifier", settings.database_url or "", MIGRATIONS)
    db.migrate()
    store = JobStore(db, JobRow)
    echo = register_tasks(app, store).echo
    payload = {"job": "echo", "n": 3, "items": ["a", "b"], "nested": {"ok": True}}
    before = time.time()
    try:
        job = submit(store, echo, kind="echo", payload=payload)
        assert job.status is JobStatus.queued
        done = wait_for_job(lambda: store.require(job.id), timeout_s=60)
    finally:
        db.close()
    assert done.status is JobStatus.succeeded, done
    value = done.result
    assert value["payload"] == payload
    assert value["sha256"] == hashlib.sha256(repr(sorted(payload.items())).encode()).hexdigest()
    assert before - 5 <= value["worker_time"] <= time.time() + 5
    assert done.attempts == 1 and done.progress.fraction == 1.0
    # It really went through the worker process, on the verifier queue, as task id = job id.
    # (The worker logs it just after the task returns, so give the line a moment.)
    line = f"verifier.echo[{job.id}] succeeded"
    deadline = time.monotonic() + 10
    while line not in worker.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert line in worker.log()


def test_echo_through_worker_embedded_broker(clean_env, start_worker):
    worker = start_worker(_worker_env(K3STACK_DATA_DIR=str(clean_env)))
    app = make_celery("verifier", load_settings())
    assert app.conf.broker_url.startswith("sqlite:///")
    assert app.conf.broker_transport == "shared.queue:EmbeddedTransport"
    try:
        _round_trip(app, worker)
    finally:
        app.close()
    assert (clean_env / "broker.db").exists() and (clean_env / "k3stack.db").exists()


def test_echo_through_worker_redis(clean_env, start_worker, redis_url, monkeypatch):
    urls = {
        "K3STACK_BROKER_URL": f"{redis_url}/0",
        "K3STACK_RESULT_BACKEND": f"{redis_url}/1",
    }
    worker = start_worker(_worker_env(K3STACK_DATA_DIR=str(clean_env), **urls))
    for name, value in urls.items():
        monkeypatch.setenv(name, value)
    app = make_celery("verifier", load_settings())
    assert app.conf.broker_url == f"{redis_url}/0"
    assert app.conf.broker_transport_options == {"visibility_timeout": 3600}
    try:
        _round_trip(app, worker)
    finally:
        app.close()
    assert not (clean_env / "broker.db").exists()  # nothing fell back to the embedded broker


def test_make_celery_defaults(clean_env):
    settings = load_settings()
    assert settings.broker_url == f"sqla+sqlite:///{clean_env / 'broker.db'}"
    assert settings.result_backend == f"db+sqlite:///{clean_env / 'results.db'}"
    app = make_celery("verifier", settings)
    assert not clean_env.exists()  # building the app touches nothing; configuring it does
    conf = app.conf
    assert app.main == "k3stack.verifier"
    assert conf.task_default_queue == "verifier"
    assert conf.task_serializer == "json" and conf.result_serializer == "json"
    assert list(conf.accept_content) == ["json"]
    assert conf.broker_url == settings.broker_url.removeprefix("sqla+")
    assert conf.result_backend == settings.result_backend
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.task_always_eager is False
    assert clean_env.is_dir()  # the SQLite files' folder exists before any worker starts
    # Anything JSON cannot carry is refused when sending, not pickled.
    with pytest.raises(EncodeError):
        app.send_task("verifier.echo", args=[{1, 2}])
    app.close()


def test_verifier_task_name_matches_what_tests_send(clean_env):
    from services.verifier import tasks

    assert tasks.echo.name == "verifier.echo"
    assert tasks.celery.conf.task_default_queue == "verifier"


def test_worker_argv_consumes_the_service_queue():
    argv = worker_argv("verifier", concurrency=0, pool="solo")
    assert argv[:4] == ["-m", "celery", "-A", "services.verifier.tasks"]
    assert argv[argv.index("-Q") + 1] == "verifier"
    assert argv[argv.index("--concurrency") + 1] == "1"
    assert argv[argv.index("--pool") + 1] == "solo"
    assert {"--without-gossip", "--without-mingle", "--without-heartbeat"} <= set(argv)
