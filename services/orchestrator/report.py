"""The HTML report of an episode: a timeline over the simulated days (events arriving, the
agent's messages and tool calls, compactions) and each check's verdict. Self-contained (inline
CSS, no scripts), so it opens from the object store or a file."""

from __future__ import annotations

from html import escape
from typing import Any

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#1d232b}
h1{font-size:1.4rem} .meta span{margin-right:1.4rem;color:#555}
#score{font-size:1.2rem;font-weight:600;padding:.6rem 1rem;background:#eef5ee;display:inline-block}
.day{border-left:4px solid #4a7bd0;margin:1.2rem 0;padding-left:1rem}
.day h2{font-size:1.1rem;margin:.2rem 0}
.item{margin:.35rem 0;padding:.35rem .6rem;border-radius:4px;background:#f6f7f9;white-space:pre-wrap}
.assistant{background:#eef2fb} .tool-call{background:#fff;border:1px solid #dde}
.tool-call.error{border-color:#d55;background:#fff4f4} .clock{background:#fff8e0}
.compaction{background:#f1e9fb;border:1px dashed #8a5cc7}
table{border-collapse:collapse;width:100%;margin-top:1rem} td,th{border:1px solid #ccd;padding:.3rem .5rem;text-align:left}
.pass{color:#1a7f37;font-weight:600} .fail{color:#c62828;font-weight:600}
code{font-size:12px}
"""


def _short(text: Any, n: int = 600) -> str:
    s = "" if text is None else str(text)
    return escape(s if len(s) <= n else s[:n] + " …")


def _item_html(it: dict[str, Any]) -> str:
    kind = it["kind"]
    if kind == "assistant":
        msg = it.get("message") or {}
        calls = "".join(
            f"<div><code>{escape(c['function']['name'])}({_short(c['function']['arguments'], 300)})</code></div>"
            for c in msg.get("tool_calls") or []
        )
        text = _short(msg.get("content")) or "<em>(tool calls)</em>"
        return (
            f'<div class="item assistant"><b>agent · step {it.get("step")}</b> {text}{calls}</div>'
        )
    if kind == "tool":
        cls = "tool-call error" if it.get("is_error") else "tool-call"
        return (
            f'<div class="item {cls}"><b>{escape(it.get("name", ""))}</b> '
            f"<code>{_short(it.get('arguments'), 300)}</code>\n→ {_short(it.get('observation'), 400)}</div>"
        )
    if kind == "clock":
        fired = ", ".join(it.get("fired") or []) or "nothing new"
        return f'<div class="item clock">clock {escape(it["from"])} → {escape(it["to"])} · arrived: {escape(fired)}</div>'
    if kind == "compaction":
        return (
            f'<div class="item compaction"><b>compaction ({escape(it.get("policy", ""))})</b> '
            f"segment {it.get('segment_from')} → {it.get('segment_to')}: "
            f"{it.get('tokens_before')} → {it.get('tokens_after')} tokens "
            f"(threshold {it.get('threshold')})\n{_short(it.get('summary'), 800)}</div>"
        )
    if kind == "user":
        return f'<div class="item user"><b>user</b> {_short((it.get("message") or {}).get("content"))}</div>'
    if kind == "error":
        return f'<div class="item tool-call error"><b>error ({escape(it.get("where", ""))})</b> {_short(it.get("message"))}</div>'
    return ""


def render_report(doc: dict[str, Any]) -> str:
    items = doc.get("items", [])
    result = doc.get("result") or {}
    score = next((i for i in items if i["kind"] == "score"), None) or {}
    result = result or score
    days: list[tuple[int, list[str]]] = []
    day = 1
    for it in items:
        if it["kind"] == "clock":
            day = it.get("day", day)
        if it["kind"] in ("system", "score"):
            continue
        if not days or days[-1][0] != day:
            days.append((day, []))
        days[-1][1].append(_item_html(it))
    timeline = "".join(
        f'<section class="day" data-day="{d}"><h2>Simulated day {d}</h2>{"".join(parts)}</section>'
        for d, parts in days
    )
    rows = []
    for ev in result.get("events") or []:
        for chk in ev.get("checks") or [{"id": "—", "passed": ev.get("passed"), "description": ""}]:
            verdict = "pass" if chk.get("passed") else "fail"
            rows.append(
                f'<tr class="check {verdict}"><td>{escape(str(ev.get("event_id")))}</td>'
                f"<td>{escape(str(ev.get('title') or ''))}</td><td>{escape(str(chk.get('id')))}</td>"
                f"<td>{escape(str(chk.get('description') or ''))}</td>"
                f'<td class="{verdict}">{verdict.upper()}</td></tr>'
            )
    reward = doc.get("reward")
    passed, total = result.get("events_passed"), result.get("events_total")
    score_text = (
        f"reward {reward:.3f} · events passed {passed}/{total}" if reward is not None
        else f"exit: {escape(str(result.get('exit_reason')))}"
    )  # fmt: skip
    if result.get("exit_detail"):
        score_text += f" · {escape(str(result['exit_reason']))}: {escape(result['exit_detail'])}"
    task = doc.get("task") or {}
    usage = doc.get("usage") or {}
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Episode {escape(doc.get("episode_id", ""))}</title><style>{CSS}</style></head><body>
<h1>Episode {escape(doc.get("episode_id", ""))}</h1>
<div class="meta"><span>harness <b id="harness">{escape(str(doc.get("harness")))}</b></span>
<span>policy {escape(str(doc.get("policy")))}</span>
<span>scenario {escape(str(task.get("scenario")))} (seed {escape(str(task.get("seed")))})</span>
<span>tokens {usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)}</span>
<span>segments {doc.get("segments")}</span></div>
<p id="score">{score_text}</p>
<h2>Timeline</h2><div id="timeline">{timeline}</div>
<h2>Checks</h2><table id="checks"><tr><th>event</th><th>title</th><th>check</th><th>what</th><th>verdict</th></tr>
{"".join(rows)}</table></body></html>"""
