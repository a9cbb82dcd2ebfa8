"""The oracle engine behind the recording gateway drives the real CLIs through a whole scenario:
every world change is the CLI's own MCP tool call, and the score is the oracle's."""

from __future__ import annotations

import pytest

from services.orchestrator.drivers import DRIVERS
from services.orchestrator.episode.export import to_shared, trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from services.orchestrator.harness.config import load_harness
from services.orchestrator.installed.catalog import AGENTS
from services.orchestrator.installed.compare import fidelity, table
from shared.trajectory.atif import to_atif, validate_atif
from tests.orchestrator.conftest import oracle_score

pytestmark = pytest.mark.timeout(900)
SCENARIO = "hr_onboarding"


def _run(orch_db, agent_services, harness: str):
    body = EpisodeCreate.model_validate(
        {"task": {"scenario": SCENARIO, "seed": 0}, "harness": harness,
         "policy": {"kind": "oracle"}, "budgets": {"max_wall_s": 800}}
    )  # fmt: skip
    episode_id = create_episode(orch_db, body, lambda _id: None)
    EpisodeRunner(orch_db, agent_services, episode_id, drivers=DRIVERS).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
    return row, trajectory(orch_db, episode_id)


@pytest.mark.parametrize("preset", list(AGENTS))
def test_real_cli_driven_by_the_oracle_scores_every_event(
    orch_db, agent_services, tools_url, preset
):
    row, doc = _run(orch_db, agent_services, preset)
    assert row.status == "succeeded", (row.error_code, row.error_message)
    # the whole scenario, not a budget (agent_timeout: the CLI was killed at max_wall_s)
    assert row.result["exit_reason"] == "scenario_end", row.result
    passed, total = oracle_score(tools_url, SCENARIO, 0)
    assert (row.result["events_passed"], row.result["events_total"]) == (passed, total)
    assert passed == total
    calls = [x for x in doc["items"] if x["kind"] == "exchange" and x.get("oracle_call")]
    assert calls, "the CLI made no tool call the oracle asked for"
    atif = to_atif(to_shared(doc))
    validate_atif(atif)
    assert atif["agent"]["version"] == AGENTS[preset].version
    assert atif["extra"]["k3stack"]["extra"]["agent_runtime"] == "process"
    # each exchange an agent step; the oracle's calls there, answered by the CLI's tool results
    agent_steps = [s for s in atif["steps"] if s["source"] == "agent"]
    exchanges = [x for x in doc["items"] if x["kind"] == "exchange"]
    assert len(agent_steps) == len(exchanges)
    assert AGENTS[preset].wire_api in {x["api"] for x in exchanges}  # the catalogue's word
    called = [c["function_name"] for s in agent_steps for c in s.get("tool_calls", [])]
    assert len(called) == len(calls), (called, [x["oracle_call"] for x in calls])
    assert sum(len(s.get("observation", {}).get("results", [])) for s in agent_steps) == len(called)

    # the fidelity table against the white-box preset it imitates (printed for the README); a
    # CLI added by its spec alone (Qwen Code) imitates none
    based_on = load_harness(preset).based_on
    if based_on is None:
        assert AGENTS[preset].harness is not None, "only a spec-only CLI has no counterpart"
        return
    _, white_doc = _run(orch_db, agent_services, based_on)
    white, real = fidelity(white_doc), fidelity(doc)
    print(f"\n| {preset} vs white-box | white-box | real CLI |\n|---|---|---|")
    for key, a, b in table(white, real):
        print(f"| {key} | {a} | {b} |")
    assert real["world tools offered"] > 0 and real["tools called"]
    assert white["tools called"] and real["requests per day"] > 0
    assert real["system prompt (chars)"] > 0 and white["system prompt (chars)"] > 0
