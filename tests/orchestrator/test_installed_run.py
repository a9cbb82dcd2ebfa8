"""The acceptance command as a user runs it: ``k3stack run --scenario hr_onboarding --harness
claude-code-cli --policy oracle`` (and every other installed agent) against the orchestrator service, a Celery
worker and the sandbox service (processes, embedded stores), the real binary running in the
episode's sandbox (process runtime) driven by the gateway's oracle engine: every event scored,
the real agent, its version and the sandbox runtime in the ATIF export, the report written."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from services.orchestrator.installed.catalog import AGENTS
from shared.trajectory import Trajectory
from shared.trajectory.atif import to_atif, validate_atif
from tests.orchestrator.conftest import TOOLS_ADMIN, oracle_score
from tests.orchestrator.test_cli_run import k3stack_run, orchestrator_processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
SCENARIO = "hr_onboarding"


# Through `k3stack run` for the CLIs quick enough for CI's budget; test_installed_oracle drives all
# five through the same episode path, and OpenClaw (15-30 s per invocation) only there.
RUN_PRESETS = ["claude-code-cli", "codex-cli", "kimi-code-cli", "hermes-cli"]


@pytest.mark.parametrize("preset", RUN_PRESETS)
def test_k3stack_run_with_the_real_cli_scores_every_event(
    tools_url, sandbox_url, tmp_path: Path, monkeypatch, preset: str
) -> None:
    agent = AGENTS[preset]
    assert agent.installed(), "run scripts/setup_agents.sh"
    with orchestrator_processes(tools_url, tmp_path, monkeypatch, sandbox_url) as api_url:
        result = k3stack_run(
            "--scenario", SCENARIO, "--harness", preset, "--policy", "oracle",
            "--poll-s", "1",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        passed, total = oracle_score(tools_url, SCENARIO, 0)
        assert passed == total
        assert f"reward 1.000 ({total}/{total} events)" in result.output, result.output
        report_url = result.output.strip().splitlines()[-1].split("report: ", 1)[1]
        page = httpx.get(report_url, timeout=30)
        assert page.status_code == 200 and "Simulated day" in page.text, page.text[-2000:]
        assert "agent CLI · day" in page.text and "model call" in page.text
        (episode,) = httpx.get(f"{api_url}/episodes", timeout=30).json()["episodes"]
        assert episode["status"] == "succeeded"
        raw = httpx.get(f"{api_url}/episodes/{episode['id']}/trajectory", timeout=60)
        atif = to_atif(Trajectory.model_validate_json(raw.content))
    validate_atif(atif)
    assert atif["extra"]["k3stack"]["extra"]["agent_runtime"] == "process"
    assert (atif["agent"]["name"], atif["agent"]["version"]) == (agent.name, agent.version)
    calls = [c for s in atif["steps"] if s["source"] == "agent" for c in s.get("tool_calls", [])]
    # only world tools, each the oracle's step by the CLI's own name for it (Codex calls a tool
    # of its per-app namespace by its bare name, hyphens as underscores)
    plan = httpx.get(f"{tools_url}/scenarios/{SCENARIO}/oracle", params={"seed": 0},
                     headers=TOOLS_ADMIN, timeout=60).json()["steps"]  # fmt: skip
    names = {c["function_name"] for c in calls}
    if preset == "codex-cli":
        planned = {st["tool"].replace("-", "_") for st in plan}
    else:  # mcp__<app>__<tool> (Hermes spells hyphens as underscores)
        planned = {f"mcp__{st['app']}__{st['tool']}".replace("-", "_") for st in plan}
        names = {n.replace("-", "_") for n in names}
    assert calls and names <= planned, (calls, planned)
    assert any(s.get("observation") for s in atif["steps"] if s["source"] == "agent")
    written = tmp_path / "data" / "objects" / "orchestrator" / "episodes" / episode["id"]
    assert (written / "report.html").is_file() and (written / "trajectory.json").is_file()


# the first two pairs through the CLI; every pair's table is also test_installed_oracle's (the
# newer CLIs cost minutes a run: OpenClaw's about ten)
@pytest.mark.parametrize("preset", ["claude-code-cli", "codex-cli"])
def test_k3stack_harness_compare_prints_both_fingerprints(
    tools_url, sandbox_url, tmp_path: Path, monkeypatch, preset: str
) -> None:
    """``k3stack harness compare WHITE REAL --scenario hr_onboarding``: both run with the oracle
    (the real CLI in its sandbox) and the table shows both columns, each scoring every event."""
    from typer.testing import CliRunner

    from services.orchestrator import cli
    from services.orchestrator.harness.config import load_harness

    white = str(load_harness(preset).based_on)
    monkeypatch.setattr(cli.console, "width", 1000)  # one line a row
    with orchestrator_processes(tools_url, tmp_path, monkeypatch, sandbox_url):
        result = CliRunner().invoke(
            cli.harness_app, ["compare", white, preset, "--scenario", SCENARIO, "--poll-s", "1"]
        )
    print(result.output)  # the README's table
    assert result.exit_code == 0, result.output
    _, total = oracle_score(tools_url, SCENARIO, 0)
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    for key in ("native tools offered", "system prompt (chars)", "requests per day",
                "tokens per request (mean)", "compactions (at tokens)"):  # fmt: skip
        assert key in rows, result.output
    assert rows["events passed"].count(f"{total}/{total}") == 2, rows["events passed"]
    if preset == "codex-cli":  # the corrected white-box preset runs commands as the CLI does
        assert rows["native tools offered"].count("exec_command") == 2, rows
