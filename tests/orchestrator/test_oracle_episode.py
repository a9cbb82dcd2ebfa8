"""Vertical slice: an oracle episode of a real scenario against the real tools service,
scored by the world's checks, with the preset's native tool names."""

from __future__ import annotations

import pytest

from services.orchestrator.episode.export import trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from tests.orchestrator.conftest import oracle_score


def run_oracle_episode(db, services, scenario: str, harness: str, seed: int = 0, **extra):
    body = EpisodeCreate.model_validate(
        {"task": {"scenario": scenario, "seed": seed}, "harness": harness,
         "policy": {"kind": "oracle"}, **extra}
    )  # fmt: skip
    episode_id = create_episode(db, body, lambda _id: None)
    EpisodeRunner(db, services, episode_id).run()
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
    return row, trajectory(db, episode_id)


@pytest.mark.parametrize("scenario", ["finance_expenses", "hr_leave"])
def test_oracle_episode_reaches_the_oracles_score(orch_db, services, tools_url, scenario) -> None:
    row, doc = run_oracle_episode(orch_db, services, scenario, "claude-code")
    assert row.status == "succeeded", row.error_message
    passed, total = oracle_score(tools_url, scenario, 0)
    assert (row.result["events_passed"], row.result["events_total"]) == (passed, total)
    assert row.reward == pytest.approx(passed / total)
    calls = [i for i in doc["items"] if i["kind"] == "tool"]
    assert calls and all(c["name"].startswith("mcp__") for c in calls)
    assert not [c for c in calls if c["is_error"]]
    assert any(i["kind"] == "clock" for i in doc["items"])
