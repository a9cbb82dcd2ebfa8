"""What a harness puts in an episode's system context besides its prompt: its memory files
(``memory_files``, bounded by ``memory_max_chars``) and its skill folders (``skills_dirs``).

Both are checked at submit, so an episode never fails (or silently truncates) on them later.
"""

from __future__ import annotations

from pathlib import Path

from services.orchestrator.harness.config import HarnessConfig
from services.orchestrator.skills import SKILLS_DIR, load_skills


def memory_problem(harness: HarnessConfig, supplied: dict[str, str]) -> str | None:
    """Why the submitted memory files do not fit ``harness``, or None."""
    for name, text in supplied.items():
        if name not in harness.memory_files:
            known = ", ".join(harness.memory_files) or "none"
            return f"memory.{name}: harness {harness.name} reads no such file (its files: {known})"
        if len(text) > harness.memory_max_chars:
            return (
                f"memory.{name}: {len(text):,} characters; harness {harness.name} loads at most "
                f"{harness.memory_max_chars:,} (memory_max_chars)"
            )
    return None


def memory_context(harness: HarnessConfig, supplied: dict[str, str]) -> dict[str, str]:
    """The memory files the system prompt shows, in the harness's order."""
    return {
        n: supplied[n][: harness.memory_max_chars] for n in harness.memory_files if n in supplied
    }


def skill_folders(harness: HarnessConfig, data_dir: Path) -> list[Path]:
    """The built-in skills, then each of the harness's ``skills_dirs`` (relative ones under the
    data dir; later folders win on a name)."""
    return [SKILLS_DIR, *(data_dir / d for d in harness.skills_dirs)]


def harness_skills(harness: HarnessConfig, data_dir: Path) -> dict[str, dict[str, str]]:
    """Skills by name; a malformed SKILL.md is a ValueError naming the file."""
    return load_skills(*skill_folders(harness, data_dir))
