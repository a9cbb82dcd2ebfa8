"""A real CLI whose MCP servers never answer comes up without the world's tools: the gateway's
record of its first model request shows it, and the day ends ``agent_no_tools`` (a failed job,
still scored), never a "done for now" that succeeds with a partial score (issue 37: under load
Codex came up with no tools, answered "Done for now." all episode and ended ``succeeded``)."""

from __future__ import annotations

import pytest

from services.orchestrator.drivers import DRIVERS
from services.orchestrator.episode.export import to_shared, trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from services.orchestrator.installed import launch
from services.orchestrator.installed.catalog import AGENTS
from services.orchestrator.installed.episode import InstalledDriver

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("preset", ["codex-cli", "kimi-code-cli"])
def test_mcp_that_never_answers_ends_the_day_agent_no_tools(
    orch_db, agent_services, tools_url, monkeypatch, preset
) -> None:
    assert AGENTS[preset].installed(), "run scripts/setup_agents.sh"
    real = InstalledDriver._mcp_servers

    def dead(tools: str, world, apps):  # the same servers, at a port the sandbox cannot reach
        host, _ = tools.rsplit(":", 1)
        return real(f"{host}:9", world, apps)

    monkeypatch.setattr(InstalledDriver, "_mcp_servers", staticmethod(dead))
    monkeypatch.setattr(launch, "MCP_STARTUP_TIMEOUT_S", 5)  # not the production 2 minutes
    body = EpisodeCreate.model_validate({
        "task": {"scenario": "hr_onboarding", "seed": 0}, "harness": preset,
        "policy": {"kind": "oracle"}, "budgets": {"max_wall_s": 200},
    })  # fmt: skip
    episode_id = create_episode(orch_db, body, lambda _id: None)
    EpisodeRunner(orch_db, agent_services, episode_id, drivers=DRIVERS).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        status, code, result = row.status, row.error_code, row.result or {}
        message = row.error_message or ""
    assert (status, code) == ("failed", "agent_no_tools"), (status, code, message, result)
    assert result["exit_reason"] == "agent_no_tools" and "offered none" in message
    assert result["events_total"] > 0 and result["events_passed"] < result["events_total"]
    doc = trajectory(orch_db, episode_id)
    days = [i for i in doc["items"] if i["kind"] == "agent_day"]
    assert [d["outcome"] for d in days] == ["agent_no_tools"], days
    exchanges = [i for i in doc["items"] if i["kind"] == "exchange"]
    assert exchanges and not any(i.get("oracle_call") for i in exchanges)
    exit_ = to_shared(doc).exit
    assert exit_.status == "error" and "offered none" in (exit_.reason or "")
