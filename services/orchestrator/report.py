"""The HTML report of an episode, from the Jinja2 template ``report.html.j2`` and the style
sheet ``report.css`` (inlined at render time, so the report stays one self-contained file: no
scripts, no links; it opens from the object store or a file). What it shows is read from the
trajectory document by :mod:`~services.orchestrator.report_view`."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, Environment, FileSystemLoader, Template
from markupsafe import Markup

from services.orchestrator.report_view import build

HERE = Path(__file__).parent
FULL_CAP = 20_000  # the most of one argument or result the report expands to


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _short(text: Any, n: int = 600) -> str:
    s = _text(text)
    return s if len(s) <= n else s[:n] + " …"


def _oneline(text: Any) -> str:
    return " ".join(_text(text).split())


def _full(text: Any) -> str:
    s = _text(text)
    more = len(s) - FULL_CAP
    return s if more <= 0 else s[:FULL_CAP] + f" … ({more} more characters in trajectory.json)"


@lru_cache(maxsize=1)
def css() -> str:
    return (HERE / "report.css").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _template() -> Template:
    env = Environment(
        loader=FileSystemLoader(HERE),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=ChainableUndefined,
    )
    env.filters["short"] = _short
    env.filters["full"] = _full
    env.filters["text"] = _text
    env.filters["oneline"] = _oneline
    return env.get_template("report.html.j2")


def render_report(doc: dict[str, Any]) -> str:
    """The report of a trajectory document (``episode.export.trajectory``)."""
    view = build(doc)
    return _template().render(doc=doc, css=Markup(css()), task=doc.get("task") or {}, **view)
