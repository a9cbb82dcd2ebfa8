"""A harness's memory files and skill folders reach the episode: the memory files it names are
in the system prompt (any other name, or one over ``memory_max_chars``, is refused at submit),
and the skills in its ``skills_dirs`` are listed there and load through its skill tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from services.orchestrator.episode.models import EpisodeRow, TrajectoryItemRow
from services.orchestrator.episode.policy import ScriptedPolicy, Turn, View
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.service import create_episode
from services.orchestrator.harness.config import load_harness
from services.orchestrator.harness.memory import harness_skills, memory_context, memory_problem
from shared.contracts.orchestrator import EpisodeCreate
from tests.orchestrator.test_trajectory_fields import local_services

SKILL = "---\nname: expense-policy\ndescription: How to file an expense.\n---\nReceipts first.\n"


def test_memory_is_checked_against_the_harness() -> None:
    hermes = load_harness("hermes")  # MEMORY.md, USER.md; at most 2,200 characters each
    assert "NOTES.md" in (memory_problem(hermes, {"NOTES.md": "x"}) or "")
    assert "MEMORY.md, USER.md" in (memory_problem(hermes, {"NOTES.md": "x"}) or "")
    too_long = memory_problem(hermes, {"USER.md": "x" * 2201}) or ""
    assert "memory.USER.md" in too_long and "2,200" in too_long
    assert memory_problem(hermes, {"USER.md": "x" * 2200, "MEMORY.md": "m"}) is None
    shown = memory_context(hermes, {"USER.md": "u", "MEMORY.md": "m"})
    assert list(shown) == ["MEMORY.md", "USER.md"]  # the harness's order


def test_skills_dirs_are_loaded_and_a_bad_skill_names_its_file(tmp_path: Path) -> None:
    claude = load_harness("claude-code")  # skills_dirs: [.claude/skills]
    folder = tmp_path / ".claude" / "skills" / "expense-policy"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL)
    skills = harness_skills(claude, tmp_path)
    assert skills["expense-policy"]["body"] == "Receipts first."
    assert "world-clock" in skills  # the built-in ones stay
    assert "expense-policy" not in harness_skills(load_harness("codex"), tmp_path)
    (folder / "SKILL.md").write_text("no frontmatter")
    with pytest.raises(ValueError, match="expense-policy/SKILL.md"):
        harness_skills(claude, tmp_path)


def load_skill(view: View) -> Turn:
    if not any(m.get("role") == "tool" for m in view.messages):
        call = {"id": "s1", "name": "Skill", "arguments": '{"skill": "expense-policy"}'}
        return Turn(tool_calls=[call])
    return Turn(content="done")


def test_an_episode_sees_its_memory_and_skills(orch_db: Any, tmp_path: Path, monkeypatch) -> None:
    from shared.settings import get_settings

    data = tmp_path / "data"
    folder = data / ".claude" / "skills" / "expense-policy"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL)
    monkeypatch.setenv("K3STACK_DATA_DIR", str(data))
    get_settings.cache_clear()
    try:
        harness = load_harness("claude-code")
        body = EpisodeCreate.model_validate(
            {"task": {"instruction": "file it"}, "memory": {"CLAUDE.md": "Sign as Sam."}}
        )
        episode_id = create_episode(orch_db, body, lambda _id: None, harness)
        policy = ScriptedPolicy(load_skill)
        EpisodeRunner(orch_db, local_services(tmp_path), episode_id, policy).run()
        with orch_db.session() as s:
            row = s.get(EpisodeRow, episode_id)
            assert row.status == "succeeded", row.error_message
            items = s.scalars(
                select(TrajectoryItemRow).where(TrajectoryItemRow.episode_id == episode_id)
            ).all()
        system = next(i.body["message"]["content"] for i in items if i.kind == "system")
        assert "Sign as Sam." in system and "expense-policy: How to file an expense." in system
        tool = next(i.body for i in items if i.kind == "tool")
        assert tool["observation"] == "Receipts first."
    finally:
        get_settings.cache_clear()
