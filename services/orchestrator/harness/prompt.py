"""Render a harness's system prompt (Jinja) with its slots filled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, DictLoader, Environment, FileSystemLoader, StrictUndefined

PROMPTS_DIR = Path(__file__).parent / "prompts"


def check_template(template: str) -> str | None:
    """Why ``template`` cannot be rendered (a missing file under prompts/, bad Jinja), or None:
    checked when a harness loads, so an episode never fails on it later."""
    from jinja2 import TemplateError

    try:
        render_system_prompt(template)
    except TemplateError as exc:
        kind = "no template" if type(exc).__name__ == "TemplateNotFound" else "bad template"
        return f"{kind} {template[:120]!r} under prompts/: {exc}"
    return None


def render_system_prompt(
    template: str,
    *,
    environment: dict[str, Any] | None = None,
    memory: dict[str, str] | None = None,
    skills: list[dict[str, str]] | None = None,
    now: str = "",
    reasoning_effort: str | None = None,
) -> str:
    """``template`` names a file under prompts/ or is inline Jinja."""
    inline = {} if template.endswith(".j2") else {"__inline__": template}
    env = Environment(
        loader=ChoiceLoader([DictLoader(inline), FileSystemLoader(PROMPTS_DIR)]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )
    tpl = env.get_template("__inline__" if inline else template)
    text = tpl.render(
        environment=environment or {},
        memory=memory or {},
        skills=skills or [],
        now=now,
        reasoning_effort=reasoning_effort,
        env_open="",
        env_close="",
        skills_intro="Skills:",
    )
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if line == "" and out and out[-1] == "":
            continue
        out.append(line)
    return "\n".join(out).strip() + "\n"
