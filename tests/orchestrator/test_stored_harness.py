"""The harness resolved at submit is stored with the episode and used when it runs (and on
every resume): editing the harness file afterwards changes no queued episode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.policy import ScriptedPolicy, Turn, View
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.service import create_episode
from services.orchestrator.harness.config import load_harness
from shared.contracts.orchestrator import EpisodeCreate
from tests.orchestrator.test_trajectory_fields import local_services

MINE = (
    "name: mine\nsystem_prompt: claude-code.md.j2\ntools: [TodoWrite]\nbudgets: {max_steps: %d}\n"
)


def busy(view: View) -> Turn:
    todo = '{"todos": [{"content": "a", "status": "pending", "activeForm": "doing a"}]}'
    return Turn(tool_calls=[{"id": f"t{view.step}", "name": "TodoWrite", "arguments": todo}])


def test_an_edited_harness_changes_no_queued_episode(
    orch_db: Any, tmp_path: Path, monkeypatch
) -> None:
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    try:
        path = tmp_path / "data" / "harnesses" / "mine.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(MINE % 3)
        harness = load_harness("mine", tmp_path / "data")
        body = EpisodeCreate.model_validate({"task": {"instruction": "go"}, "harness": "mine"})
        episode_id = create_episode(orch_db, body, lambda _id: None, harness)
        path.write_text(MINE % 1)  # edited while the episode is queued
        EpisodeRunner(orch_db, local_services(tmp_path), episode_id, ScriptedPolicy(busy)).run()
        with orch_db.session() as s:
            row = s.get(EpisodeRow, episode_id)
            assert row.status == "succeeded", row.error_message
            assert row.state["step"] == 3 and row.state["exit_reason"] == "max_steps"
    finally:
        get_settings.cache_clear()
