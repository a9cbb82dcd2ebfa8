"""A real Celery worker is SIGKILLed mid-episode: the reaper re-queues the episode when the
lease lapses, a second worker finishes it from its last step, and every side-effecting call
ran exactly once — the world's action log matches an uninterrupted run's."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from services.orchestrator.episode.journal import current_state
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner, EpisodeStore
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode, reap
from shared.jobs import JobPolicy
from shared.queue import make_celery, worker_argv
from tests.helpers.servers import spawn
from tests.orchestrator.conftest import REPO, TOOLS_ADMIN, service_env

SCENARIO = "hr_onboarding"
REQUEST = {
    "task": {"scenario": SCENARIO, "seed": 2},
    "harness": "codex",
    "policy": {"kind": "oracle"},
    "keep_world": True,
}


def agent_actions(tools_url: str, world_id: str) -> Counter:
    state = httpx.get(f"{tools_url}/worlds/{world_id}/state", timeout=60, headers=TOOLS_ADMIN)
    state = state.json()
    rows = state["tables"]["tools_actions"]
    return Counter((r["app"], r["action"]) for r in rows if r["actor"] == "agent")


def wait_for(predicate, what: str, timeout: float = 240.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkilled_worker_episode_completes_on_another(
    tools_url, tools_server_pgid, orch_db, services, tmp_path: Path
) -> None:
    # The reference: the same episode, uninterrupted, in this process.
    ref_id = create_episode(orch_db, EpisodeCreate.model_validate(REQUEST), lambda _i: None)
    EpisodeRunner(orch_db, services, ref_id).run()
    with orch_db.session() as s:
        ref = s.get(EpisodeRow, ref_id)
        ref_world, ref_result = ref.world_id, ref.result
    assert ref.status == "succeeded"
    expected = agent_actions(tools_url, ref_world)
    assert sum(expected.values()) > 10

    data = tmp_path / "worker-data"
    env = service_env(
        data,
        K3STACK_DATABASE_URL=str(orch_db.engine.url),
        K3STACK_BROKER_URL=f"sqla+sqlite:///{tmp_path}/broker.db",
        K3STACK_RESULT_BACKEND=f"db+sqlite:///{tmp_path}/results.db",
        K3STACK_TOOLS__URL=tools_url,
        K3STACK_MODEL__URL="http://127.0.0.1:9",
        K3STACK_SANDBOX__URL="http://127.0.0.1:9",
        K3STACK_ORCHESTRATOR__LEASE_S="2",
        K3STACK_HTTP_TIMEOUT_S="600",
    )
    from shared.settings import load_settings

    settings = load_settings(
        broker_url=env["K3STACK_BROKER_URL"], result_backend=env["K3STACK_RESULT_BACKEND"]
    )
    app = make_celery("orchestrator", settings)

    def enqueue(episode_id: str) -> None:
        app.send_task("orchestrator.run_episode", args=[episode_id], queue="orchestrator")

    argv = [sys.executable, *worker_argv("orchestrator", concurrency=1, pool="solo")]
    episode_id = create_episode(orch_db, EpisodeCreate.model_validate(REQUEST), enqueue)

    def progress() -> tuple[str, int]:
        with orch_db.session() as s:
            row = s.get(EpisodeRow, episode_id)
            return row.status, current_state(s, row).step  # the journal's, as of now

    with spawn(argv, env=env, cwd=REPO, ready_text=" ready.", timeout=120) as first:
        wait_for(lambda: progress()[1] >= 5, "the first worker's fifth step")
        # Freeze the tools service so the worker is caught mid-episode, then kill it.
        os.killpg(tools_server_pgid, signal.SIGSTOP)
        try:
            status, step = progress()
            assert status == "running"
            os.killpg(first.pgid, signal.SIGKILL)
            first.proc.wait(timeout=30)
        finally:
            os.killpg(tools_server_pgid, signal.SIGCONT)
    killed_at = step

    with spawn(argv, env=env, cwd=REPO, ready_text=" ready.", timeout=120):
        # The lapsed lease is reaped (the service's reaper thread does this every few s).
        store = EpisodeStore(orch_db, policy=JobPolicy(heartbeat_s=0.5, lease_s=2.0))
        wait_for(lambda: reap(orch_db, None, enqueue, store)["requeued"], "the lease to lapse")
        wait_for(lambda: progress()[0] in ("succeeded", "failed"), "the episode to finish")

    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        assert row.status == "succeeded", row.error_message
        assert row.attempts == 2
        assert row.state["step"] > killed_at
        assert row.result["events_passed"] == ref_result["events_passed"]
        assert row.result["events_total"] == ref_result["events_total"]
        world_id = row.world_id
    assert agent_actions(tools_url, world_id) == expected
