"""Cancellation and the reaper: a queued episode is cancelled at once, a running one at its
next step (its world released); a lapsed lease is re-queued; leftovers are released."""

from __future__ import annotations

import threading
from datetime import timedelta

import httpx

from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.policy import ScriptedPolicy, Turn
from services.orchestrator.episode.runner import EpisodeRunner, now_utc
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode, reap, request_cancel
from tests.orchestrator.conftest import TOOLS_ADMIN

BODY = {"task": {"scenario": "finance_expenses"}, "harness": "claude-code",
        "policy": {"kind": "oracle"}}  # fmt: skip


def status(db, episode_id: str) -> EpisodeRow:
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
        return row


def test_cancel_queued_and_running(orch_db, services, tools_url) -> None:
    queued = create_episode(orch_db, EpisodeCreate.model_validate(BODY), lambda _id: None)
    assert request_cancel(orch_db, services, queued).status == "cancelled"
    EpisodeRunner(orch_db, services, queued).run()  # a late delivery does nothing
    assert status(orch_db, queued).state == {}

    running = create_episode(orch_db, EpisodeCreate.model_validate(BODY), lambda _id: None)
    gate, resume = threading.Event(), threading.Event()

    def slow(view) -> Turn:  # holds the episode mid-way until the test has cancelled it
        if view.step == 2:
            gate.set()
            resume.wait(60)
        return Turn(tool_calls=[{"id": f"c{view.step}", "name": "TodoWrite", "arguments":
                    '{"todos": []}'}])  # fmt: skip

    runner = EpisodeRunner(orch_db, services, running, policy=ScriptedPolicy(slow))
    t = threading.Thread(target=runner.run)
    t.start()
    assert gate.wait(120)
    assert request_cancel(orch_db, services, running).cancel_requested
    resume.set()
    t.join(120)
    row = status(orch_db, running)
    assert row.status == "cancelled" and row.resources_released
    assert row.state["step"] <= 4
    gone = httpx.get(f"{tools_url}/worlds/{row.world_id}", timeout=30, headers=TOOLS_ADMIN)
    assert gone.status_code == 404


def test_reaper_requeues_a_lapsed_lease_and_releases_leftovers(orch_db, services) -> None:
    lapsed = create_episode(orch_db, EpisodeCreate.model_validate(BODY), lambda _id: None)
    with orch_db.session() as s:
        row = s.get(EpisodeRow, lapsed)
        row.status, row.owner = "running", "gone-host:1:1"
        lease = services.settings.orchestrator.lease_s
        row.heartbeat_at = now_utc() - timedelta(seconds=lease + 1)
    queued: list[str] = []
    out = reap(orch_db, services, queued.append)
    assert out["requeued"] == [lapsed] and queued == [lapsed]
    assert status(orch_db, lapsed).status == "queued"
    EpisodeRunner(orch_db, services, lapsed).run()  # the re-queued delivery
    done = status(orch_db, lapsed)
    assert done.status == "succeeded" and done.reward == 1.0 and done.attempts == 1

    leftover = create_episode(orch_db, EpisodeCreate.model_validate(BODY), lambda _id: None)
    world = services.tools.create_world("finance_expenses", 0)
    with orch_db.session() as s:
        row = s.get(EpisodeRow, leftover)
        row.status, row.world_id = "failed", world.id
    assert leftover in reap(orch_db, services, queued.append)["released"]
    assert status(orch_db, leftover).resources_released
    assert reap(orch_db, services, queued.append) == {"requeued": [], "released": []}


def test_an_episode_that_keeps_losing_its_worker_fails_worker_lost(orch_db, services) -> None:
    """The shared job model's bound: started K3STACK_JOB_MAX_ATTEMPTS times, a lapsed
    episode is failed (``worker_lost``) instead of re-queued, and its world is released."""
    lost = create_episode(orch_db, EpisodeCreate.model_validate(BODY), lambda _id: None)
    world = services.tools.create_world("finance_expenses", 0)
    with orch_db.session() as s:
        row = s.get(EpisodeRow, lost)
        row.status, row.owner, row.world_id = "running", "gone-host:1:1", world.id
        row.attempts = services.settings.job_max_attempts
        row.heartbeat_at = now_utc() - timedelta(seconds=services.settings.orchestrator.lease_s + 1)
    queued: list[str] = []
    out = reap(orch_db, services, queued.append)
    assert out == {"requeued": [], "released": [lost]} and queued == []
    row = status(orch_db, lost)
    assert row.status == "failed" and row.error_code == "worker_lost" and row.resources_released
    assert f"started {row.attempts} times" in row.error_message
    gone = httpx.get(
        f"{services.tools.base_url}/worlds/{world.id}", timeout=30, headers=TOOLS_ADMIN
    )
    assert gone.status_code == 404


def test_the_app_runs_the_shared_job_reaper(tmp_path, monkeypatch) -> None:
    """The service's reaper is the shared JobReaper's thread with the episode pass: it re-queues
    a lapsed episode on its own, and stops with the app."""
    import time

    from fastapi.testclient import TestClient

    from services.orchestrator.app import create_app
    from shared.jobs import JobReaper
    from shared.settings import get_settings

    for name in ("TOOLS", "MODEL", "SANDBOX"):
        monkeypatch.setenv(f"K3STACK_{name}__URL", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setenv("K3STACK_DATABASE_URL", f"sqlite:///{tmp_path}/orch.db")
    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("K3STACK_ORCHESTRATOR__REAPER_INTERVAL_S", "0.05")
    get_settings.cache_clear()
    queued: list[str] = []
    app = create_app(enqueue=queued.append, rollout_enqueue=lambda _id: None)
    try:
        with TestClient(app):
            reaper = app.state.reaper
            assert isinstance(reaper, JobReaper) and reaper._thread and reaper._thread.is_alive()
            db = app.state.db
            body = EpisodeCreate.model_validate({"task": {"instruction": "hi"}})
            lapsed = create_episode(db, body, lambda _id: None)
            with db.session() as s:
                row = s.get(EpisodeRow, lapsed)
                row.status, row.owner = "running", "gone-host:1:1"
                lease = get_settings().orchestrator.lease_s
                row.heartbeat_at = now_utc() - timedelta(seconds=lease + 1)
            deadline = time.monotonic() + 60
            while not queued and time.monotonic() < deadline:
                time.sleep(0.05)
            assert queued == [lapsed] and status(db, lapsed).status == "queued"
        assert not reaper._thread.is_alive()
    finally:
        get_settings.cache_clear()
