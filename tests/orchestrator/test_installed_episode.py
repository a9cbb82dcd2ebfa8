"""Episodes of the `installed` harness kind: the real Claude Code CLI (scripts/setup_agents.sh)
runs inside the episode's sandbox (the real sandbox service, process runtime) and drives a real
world of the tools service through its MCP endpoint, its model calls going through the recording
gateway to the tiny model; a day runs to its budget without crashing the episode, and a CLI
killed with SIGKILL mid-day ends it ``agent_crashed`` with its sandbox and world released."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from services.orchestrator.drivers import DRIVERS
from services.orchestrator.episode.export import to_shared, trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from services.orchestrator.installed.catalog import AGENTS
from shared.clients import ServiceError
from shared.trajectory.atif import to_atif
from tests.model.conftest import model_settings, running
from tests.orchestrator.cli_capture import LONG_CONTEXT
from tests.orchestrator.conftest import TOOLS_ADMIN

pytestmark = pytest.mark.timeout(600)
SCENARIO = "hr_onboarding"


@pytest.fixture(scope="module")
def tiny_long():
    from services.model.app import create_app

    with running(create_app(model_settings(**LONG_CONTEXT))) as server:
        yield server.url


def _episode(db, model_url: str, **budgets) -> str:
    body = EpisodeCreate.model_validate(
        {
            "task": {"scenario": SCENARIO, "seed": 0},
            "harness": "claude-code-cli",
            "policy": {"kind": "openai", "base_url": model_url + "/v1", "model": "k3-tiny"},
            "budgets": budgets,
        }
    )
    return create_episode(db, body, lambda _id: None)


def _row(db, episode_id: str) -> EpisodeRow:
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
    return row


def test_real_cli_on_the_tiny_model_runs_its_day_and_is_scored(orch_db, agent_services, tiny_long):
    assert AGENTS["claude-code-cli"].installed()
    episode_id = _episode(orch_db, tiny_long, max_output_tokens=8, steps_per_day=1, max_wall_s=240)
    EpisodeRunner(orch_db, agent_services, episode_id, drivers=DRIVERS).run()
    row = _row(orch_db, episode_id)
    assert row.result["events_total"] > 0 and row.resources_released  # scored either way
    doc = trajectory(orch_db, episode_id)
    days = [i for i in doc["items"] if i["kind"] == "agent_day"]
    exchanges = [i for i in doc["items"] if i["kind"] == "exchange"]
    # with the world's 46 MCP tools the prompt may pass the tiny model's context: a 400 the CLI
    # reports and ends its turn on (the day then ends policy_error, the job failed, named),
    # never a 5xx nor a crash
    assert exchanges and all(x["status"] < 500 for x in exchanges)
    refused = exchanges[-1]["status"] >= 400
    assert (row.status, row.error_code) == (
        ("failed", "policy_error") if refused else ("succeeded", None)
    ), row.error_message
    assert days and all(d["outcome"] == "turn_ended" for d in days[:-1]), days
    assert days[-1]["outcome"] == ("policy_error" if refused else "turn_ended"), days
    assert all(x["request"]["max_tokens"] == 8 for x in exchanges if x["api"] == "messages")
    atif = to_atif(to_shared(doc))
    agent = AGENTS["claude-code-cli"]
    assert (atif["agent"]["name"], atif["agent"]["version"]) == (agent.name, agent.version)
    assert atif["extra"]["k3stack"]["extra"]["agent_runtime"] == "process"
    assert _released(agent_services, row.sandbox_id)


def _released(agent_services, sandbox_id: str | None) -> bool:
    assert sandbox_id, "the episode had no sandbox"
    try:
        return agent_services.sandbox.get(sandbox_id).state == "killed"
    except ServiceError as exc:
        return exc.status == 404


def _cli_processes(root: int, prefix: str) -> list[int]:
    """Host pids of the agent binary's processes under the exec whose group is ``root``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{name}/exe")
            if exe.startswith(prefix) and os.getpgid(int(name)) == root:
                found.append(int(name))
        except OSError:
            continue
    return found


def test_sigkill_mid_day_is_agent_crashed_and_releases_the_world(
    orch_db, agent_services, tiny_long, tools_url
):
    episode_id = _episode(orch_db, tiny_long, max_output_tokens=8, max_wall_s=400)
    runner = threading.Thread(
        target=EpisodeRunner(orch_db, agent_services, episode_id, drivers=DRIVERS).run
    )
    runner.start()
    # the exec's host process group, written when the sandbox started the day's command
    pidfile = agent_services.settings.data_dir / "agent-runs" / episode_id / "agent.pid"
    prefix = str(AGENTS["claude-code-cli"].prefix())
    deadline = time.monotonic() + 240
    cli: list[int] = []
    while not cli and time.monotonic() < deadline:  # mid-day: the binary itself is running
        if pidfile.exists():
            cli = _cli_processes(int(pidfile.read_text() or 0), prefix)
        time.sleep(0.2)
    assert cli, "the CLI never started"
    # it runs in the sandbox: its own PID namespace, not the worker's
    assert os.readlink(f"/proc/{cli[0]}/ns/pid") != os.readlink("/proc/self/ns/pid")
    for pid in cli:
        os.kill(pid, signal.SIGKILL)
    runner.join(120)
    row = _row(orch_db, episode_id)
    assert (row.status, row.error_code) == ("failed", "agent_crashed"), row.error_message
    assert row.resources_released and _released(agent_services, row.sandbox_id)
    assert (
        httpx.get(f"{tools_url}/worlds/{row.world_id}/clock", headers=TOOLS_ADMIN).status_code
        == 404
    )
