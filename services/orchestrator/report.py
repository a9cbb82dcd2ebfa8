"""The HTML report of an episode, from the Jinja2 template ``report.html.j2``: a timeline over
the simulated days (events arriving with their verdicts, the agent's messages and reasoning,
each tool call once with its observation, compactions) and each check's verdict. Self-contained (inline
CSS, no scripts), so it opens from the object store or a file."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, Environment, FileSystemLoader, Template
from markupsafe import Markup

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#1d232b}
h1{font-size:1.4rem} .meta span{margin-right:1.4rem;color:#555}
#score{font-size:1.2rem;font-weight:600;padding:.6rem 1rem;background:#eef5ee;display:inline-block}
.day{border-left:4px solid #4a7bd0;margin:1.2rem 0;padding-left:1rem}
.day h2{font-size:1.1rem;margin:.2rem 0}
.item{margin:.35rem 0;padding:.35rem .6rem;border-radius:4px;background:#f6f7f9;white-space:pre-wrap}
.assistant{background:#eef2fb} .tool-call{background:#fff;border:1px solid #dde}
.tool-call.error,.failure{border:1px solid #d55;background:#fff4f4} .clock{background:#fff8e0}
.verdict{font-size:11px;padding:0 .3rem;border-radius:3px} details.reasoning{color:#555;margin-top:.3rem}
.compaction{background:#f1e9fb;border:1px dashed #8a5cc7}
table{border-collapse:collapse;width:100%;margin-top:1rem} td,th{border:1px solid #ccd;padding:.3rem .5rem;text-align:left}
.pass{color:#1a7f37;font-weight:600} .fail{color:#c62828;font-weight:600}
code{font-size:12px}
"""


def _short(text: Any, n: int = 600) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= n else s[:n] + " …"


@lru_cache(maxsize=1)
def _template() -> Template:
    env = Environment(
        loader=FileSystemLoader(Path(__file__).parent),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=ChainableUndefined,
    )
    env.filters["short"] = _short
    return env.get_template("report.html.j2")


def render_report(doc: dict[str, Any]) -> str:
    """The report of a trajectory document (``episode.export.trajectory``)."""
    items = doc.get("items", [])
    score = next((i for i in items if i["kind"] == "score"), None) or {}
    result = doc.get("result") or score
    days: list[tuple[int, list[dict[str, Any]]]] = []
    day = 1
    for it in items:
        if it["kind"] == "clock":
            day = it.get("day", day)
        if it["kind"] in ("system", "score", "tools", "scenario", "harness"):
            continue
        if not days or days[-1][0] != day:
            days.append((day, []))
        days[-1][1].append(it)
    verdicts = {e.get("event_id"): bool(e.get("passed")) for e in result.get("events") or []}
    usage = doc.get("usage") or {}
    return _template().render(
        doc=doc, css=Markup(CSS), task=doc.get("task") or {}, result=result, days=days,
        verdicts=verdicts, tokens=usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
    )  # fmt: skip
