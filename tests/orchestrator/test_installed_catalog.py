"""The installed agents: scripts/setup_agents.sh pins the versions the catalogue names, re-runs
as a stat when they are there, and `k3stack harness list` says whether each is installed."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from services.orchestrator.cli import harness_app
from services.orchestrator.harness.config import INSTALLED_NAMES, load_harness
from services.orchestrator.installed.catalog import (
    AGENTS,
    ALL,
    NODE,
    agents_dir,
    install_status,
)
from services.orchestrator.installed.episode import Day, outcome, parse_output

SCRIPT = Path(__file__).parents[2] / "scripts" / "setup_agents.sh"


def test_setup_script_pins_what_the_catalogue_names():
    text = SCRIPT.read_text()
    listed = re.findall(r'^\s+"(npm|pip) ([\w-]+) (\S+) (\S+)"$', text, re.M)
    assert sorted(listed) == sorted((a.kind, a.name, a.package, a.version) for a in ALL)
    assert f'NODE="node {NODE.package} {NODE.version}"' in text
    assert set(INSTALLED_NAMES) == set(AGENTS)
    for name in INSTALLED_NAMES:
        assert load_harness(name).kind == "installed"


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
