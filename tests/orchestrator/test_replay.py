"""A recorded episode replays exactly through the model service's ``replay`` engine: the
oracle episode's trajectory becomes a replay file, and an episode whose policy is the model
service answering from it makes the same tool calls and ends in the same world state."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services.orchestrator.episode.export import to_shared, trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from shared.trajectory.replay import write_replay_file
from tests.helpers.servers import _on_free_port
from tests.orchestrator.conftest import REPO, service_env
from tests.orchestrator.test_oracle_episode import run_oracle_episode

SCENARIO = "hr_leave"  # its mail has no attachments, so its worlds are byte-identical per seed


def calls(traj) -> list[tuple[str, str]]:
    return [
        (c.function.name, c.function.arguments)
        for s in traj.steps if s.kind == "model"
        for c in s.message.tool_calls or []
    ]  # fmt: skip


@pytest.mark.slow
def test_recorded_episode_replays_exactly(orch_db, services, tmp_path: Path) -> None:
    recorded_row, doc = run_oracle_episode(orch_db, services, SCENARIO, "claude-code",
                                           keep_world=True)  # fmt: skip
    recorded = to_shared(doc)
    replay_file = tmp_path / "episode.jsonl"
    assert write_replay_file(recorded, replay_file) == len(
        [s for s in recorded.steps if s.kind == "model"]
    )
    env = service_env(
        tmp_path / "model-data",
        K3STACK_MODEL__ENGINE="replay",
        K3STACK_MODEL__REPLAY_FILE=str(replay_file),
    )
    with _on_free_port(
        lambda port: [sys.executable, "-m", "services.model", "--port", str(port)],
        url_template="http://127.0.0.1:{port}", env=env, cwd=str(REPO), timeout=180.0,
        ready_text="Application startup complete",
    ) as model:  # fmt: skip
        body = EpisodeCreate.model_validate(
            {"task": {"scenario": SCENARIO}, "harness": "claude-code", "keep_world": True,
             "policy": {"kind": "openai", "base_url": f"{model.url}/v1"}}
        )  # fmt: skip
        episode_id = create_episode(orch_db, body, lambda _id: None)
        EpisodeRunner(orch_db, services, episode_id).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
    assert row.status == "succeeded", row.error_message
    replayed = to_shared(trajectory(orch_db, episode_id))
    assert not replayed.metadata.extra["errors"], replayed.metadata.extra["errors"]
    assert calls(replayed) == calls(recorded) and calls(recorded)
    assert row.result["state_hash"] == recorded_row.result["state_hash"]
    assert row.reward == recorded_row.reward == 1.0
