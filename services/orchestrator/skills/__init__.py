"""Skills: folders holding a SKILL.md (frontmatter ``name``, ``description``; body = the
instructions), listed in the system prompt and loaded on demand through a skill tool."""

from __future__ import annotations

from pathlib import Path

import yaml

SKILLS_DIR = Path(__file__).parent


def parse_skill(text: str, source: str) -> dict[str, str]:
    if not text.startswith("---"):
        raise ValueError(f"{source}: SKILL.md must start with a --- frontmatter block")
    _, front, body = text.split("---", 2)
    meta = yaml.safe_load(front) or {}
    name, description = str(meta.get("name", "")), str(meta.get("description", ""))
    if not name or len(name) > 64:
        raise ValueError(f"{source}: name must be 1-64 characters")
    if not description or len(description) > 1024:
        raise ValueError(f"{source}: description must be 1-1024 characters")
    return {"name": name, "description": description, "body": body.strip()}


def load_skills(*dirs: Path) -> dict[str, dict[str, str]]:
    """Skills by name from ``dirs`` (default: the built-in ones); later folders win."""
    out: dict[str, dict[str, str]] = {}
    for root in dirs or (SKILLS_DIR,):
        for path in sorted(Path(root).glob("*/SKILL.md")):
            skill = parse_skill(path.read_text(), str(path))
            out[skill["name"]] = skill
    return out
