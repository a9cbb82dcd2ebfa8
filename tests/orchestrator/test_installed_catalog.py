"""The installed agents: scripts/setup_agents.sh pins the versions the catalogue names, re-runs
as a stat when they are there, and `k3stack harness list` says whether each is installed."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

from typer.testing import CliRunner

from services.orchestrator.cli import harness_app
from services.orchestrator.harness.config import INSTALLED_NAMES, load_harness
from services.orchestrator.installed.catalog import (
    AGENTS,
    ALL,
    agents_dir,
    install_status,
)
from services.orchestrator.installed.episode import Day, outcome, parse_output, parse_text
from services.orchestrator.installed.launch import Endpoint, MCPServer, invocation
from services.orchestrator.installed.oracle import DONE, OracleEngine, offers_world_tools
from services.orchestrator.tools.builtin import check_tool_names

SCRIPT = Path(__file__).parents[2] / "scripts" / "setup_agents.sh"


def test_every_installed_preset_loads():
    """Each agent spec's harness loads and passes the submit-time tool check (the pins are
    setup's own reading of the specs: test_agent_spec)."""
    assert set(INSTALLED_NAMES) == set(AGENTS)
    for name in INSTALLED_NAMES:
        harness = load_harness(name)
        assert harness.kind == "installed"
        check_tool_names(list(harness.tools))


def test_setup_is_idempotent_and_harness_list_shows_the_versions():
    env = {**os.environ, "K3STACK_ORCHESTRATOR__AGENTS_DIR": str(agents_dir())}
    done = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("present") == len(ALL) + 1  # nothing re-installed (+1: Node)
    for agent in ALL:  # each installed, the Node-pinned ones with the pinned Node too
        assert agent.installed(), agent
    listed = CliRunner().invoke(harness_app, ["list"])
    assert listed.exit_code == 0, listed.output
    for name, agent in AGENTS.items():
        assert name in listed.output and install_status(name).startswith("yes")
        assert agent.version in listed.output


def test_missing_install_is_named(tmp_path):
    agent = AGENTS["codex-cli"]
    assert not agent.installed(tmp_path)


def test_day_outcomes_are_named():
    events, garbage = parse_output('{"type": "result"}\n\n')
    assert outcome("claude-code-cli", Day(1, events, garbage)) is None  # its own end of turn
    assert outcome("claude-code-cli", Day(-9, events)) == "agent_crashed"
    assert outcome("codex-cli", Day(0, [], ["Segmentation fault"])) == "agent_garbage"
    assert outcome("codex-cli", Day(2, [{"type": "turn.started"}])) == "agent_failed"
    assert outcome("codex-cli", Day(None, [], timed_out=True)) == "agent_timeout"
    kimi_end = {"role": "meta", "type": "session.resume_hint", "session_id": "s"}
    assert outcome("kimi-code-cli", Day(0, [kimi_end])) is None
    assert outcome("kimi-code-cli", Day(1, [{"role": "meta", "type": "error"}])) == "agent_failed"
    # OpenClaw's one JSON envelope over many lines; Hermes's quiet text and its session line
    envelope, garbage = parse_output('{\n  "payloads": [],\n  "meta": {"stopReason": "stop"}\n}\n')
    assert not garbage and outcome("openclaw-cli", Day(0, envelope)) is None
    assert outcome("openclaw-cli", Day(1, [])) == "agent_failed"
    said, garbage = parse_text("  warning: x\nDone for now.\n", "\nsession_id: 20261207_1\n")
    assert not garbage and said[-1] == {"type": "session", "session_id": "20261207_1"}
    assert "Done for now." in said[0]["text"] and outcome("hermes-cli", Day(0, said)) is None
    assert outcome("hermes-cli", Day(1, parse_text("Traceback ...\n")[0])) == "agent_failed"


def test_world_tools_offered_is_read_in_every_wire_format():
    apps = ["gmail", "google-calendar"]
    chat = {"tools": [{"type": "function", "function": {"name": "mcp__gmail__send_email"}}]}
    assert offers_world_tools("chat/completions", chat, apps) is True
    anthropic = {"tools": [{"name": "Bash"}, {"name": "mcp__google-calendar__create-event"}]}
    assert offers_world_tools("messages", anthropic, apps) is True
    codex = {"tools": [{"type": "namespace", "name": "mcp__google_calendar__",
                        "tools": [{"type": "function", "name": "create_event"}]}]}  # fmt: skip
    assert offers_world_tools("responses", codex, apps) is True
    assert offers_world_tools("messages", {"tools": [{"name": "Bash"}]}, apps) is False
    assert offers_world_tools("messages", {"messages": []}, apps) is None  # a side call


def test_oracle_answers_chat_completions_with_the_offered_tool():
    plan = {"steps": [{"at": "2025-01-01T09:00:00", "app": "gmail", "tool": "send_email",
                       "arguments": {"to": "a@b.c"}}]}  # fmt: skip
    engine = OracleEngine(plan, lambda: datetime(2025, 1, 1, 10))
    body = {"stream": True, "tools": [
        {"type": "function", "function": {"name": "mcp__gmail__send_email"}}]}  # fmt: skip
    status, chunks, note = engine.respond("chat/completions", body)
    assert status == 200 and note == {"oracle_call": "mcp__gmail__send_email"}
    call = chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]
    assert call == {"name": "mcp__gmail__send_email", "arguments": '{"to": "a@b.c"}'}
    assert chunks[1]["choices"][0]["finish_reason"] == "tool_calls"
    _, answer, note = engine.respond("chat/completions", {**body, "stream": False})  # plan done
    assert answer["choices"][0]["message"]["content"] == DONE and note["oracle_call"] is None


def test_kimi_config_is_valid_for_the_real_binary(tmp_path):
    """The generated config.toml passes the pinned binary's own ``kimi doctor``."""
    agent = AGENTS["kimi-code-cli"]
    assert agent.installed(), "run scripts/setup_agents.sh"
    endpoint = Endpoint("http://127.0.0.1:1/episodes/x", "t", "k3")
    mcp = [MCPServer("gmail", "http://127.0.0.1:1/worlds/w/mcp/gmail", {"Authorization": "x"})]
    inv = invocation(agent, endpoint, tmp_path, tmp_path, "hi", mcp=mcp, max_turns=5)
    kimi_home = Path(inv.env["KIMI_CODE_HOME"])
    assert json.loads((kimi_home / "mcp.json").read_text())["mcpServers"]["gmail"]["url"]
    done = subprocess.run(
        [inv.argv[0], "doctor", "config", str(kimi_home / "config.toml")],
        env=inv.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "startup_timeout_ms" in (kimi_home / "config.toml").read_text()


def test_a_tool_result_finds_its_call_when_the_cli_rewrote_the_id():
    """OpenClaw sends a call's id back without its non-alphanumerics (``call_ab`` -> ``callab``):
    the result is still that call's observation (else its ATIF steps had none)."""
    from services.orchestrator.exchanges import add_exchange
    from shared.trajectory import Trajectory

    traj, pending = Trajectory(id="ep_test"), set()
    call = {"index": 0, "id": "call_ab_12", "type": "function",
            "function": {"name": "mcp__gmail__send_email", "arguments": "{}"}}  # fmt: skip
    events = [{"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}]
    at = "2025-01-01T00:00:00+00:00"
    add_exchange(traj, {"api": "chat/completions", "request": {}, "events": events, "at": at},
                 pending)  # fmt: skip
    back = {"messages": [{"role": "tool", "tool_call_id": "callab12", "content": "sent"}]}
    add_exchange(traj, {"api": "chat/completions", "request": back, "events": [], "at": at},
                 pending)  # fmt: skip
    assert not pending
    (obs,) = traj.steps[0].observations
    assert (obs.tool_call_id, obs.content) == ("call_ab_12", "sent")
