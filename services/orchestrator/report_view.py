"""What the episode report shows, read from the trajectory document: the timeline cut into
sections (one per simulated day, numbered when a day has several turns or CLI invocations),
each check's verdict placed where it was decided, each installed agent's model call with its
tool calls, their arguments and results, the token totals and the attempts.

Where a verdict goes (:func:`attribute`): the white-box loop records, on each world call and
each move of the clock, the checks' verdicts it flipped (``checks``: ``flipped``, and after a
gap in the record, ``before``). A check is decided by the last recorded flip to its final
verdict, when nothing unrecorded changed it since: on that call's line, or on the clock's line
when the world's own time decided it (an event arriving, a deadline passing). A check that no
action ever flipped held from the start. Anything else (no record, as for an installed agent's
calls, or a change the record did not see) is placed at the end of the day its verdict was
frozen in, or in the closing section, and labelled so: a verdict is never put on a line that
did not decide it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.orchestrator.exchanges import (
    exchange_message,
    exchange_results,
    same_call,
)

HIDDEN = ("system", "score", "tools", "scenario", "harness")
ON_CALL, ON_CLOCK, HELD, AT_END = "call", "clock", "held", "end"


@dataclass
class Verdict:
    event_id: str
    check_id: str
    passed: bool
    description: str
    how: str  # ON_CALL | ON_CLOCK | HELD | AT_END
    final: bool = True
    evaluated_at: str | None = None

    @property
    def key(self) -> str:
        return f"{self.event_id}/{self.check_id}"


@dataclass
class Section:
    day: int
    items: list[dict[str, Any]] = field(default_factory=list)
    decided: list[Verdict] = field(default_factory=list)  # at the end of this section
    number: int = 1  # within its day
    of: int = 1
    invoked: bool = False  # an installed agent's invocation ended in it

    @property
    def title(self) -> str:
        if self.of == 1:
            return f"Simulated day {self.day}"
        unit = "invocation" if self.invoked else "turn"
        return f"Simulated day {self.day} · {unit} {self.number} of {self.of}"


@dataclass
class Placement:
    how: str
    at: int | None = None  # the deciding item's index


def verdicts_of(result: dict[str, Any]) -> list[Verdict]:
    """Every check's final verdict (an event without checks: the event's own)."""
    out = []
    for ev in result.get("events") or []:
        checks = ev.get("checks") or [{"id": "—", "passed": ev.get("passed")}]
        for c in checks:
            at = c.get("evaluated_at")
            out.append(Verdict(
                ev["event_id"], str(c.get("id")), bool(c.get("passed")),
                c.get("description") or "", AT_END, bool(c.get("final", True)),
                str(at) if at is not None else None,
            ))  # fmt: skip
    return out


def attribute(items: list[dict[str, Any]], verdicts: list[Verdict]) -> dict[str, Placement]:
    """Where each verdict was decided, from the items' recorded flips (module docstring)."""
    known: dict[str, bool] = {}
    last: dict[str, tuple[str, int]] = {}  # key -> (what flipped it last, item index)
    recorded = False
    for idx, it in enumerate(items):
        evidence = it.get("checks") if it["kind"] in ("tool", "clock") else None
        if not isinstance(evidence, dict):
            continue
        recorded = True
        for k, v in (evidence.get("before") or {}).items():
            if k in known and known[k] != v:  # changed where nothing recorded it
                last[k] = ("gap", idx)
            known[k] = v
        for k, v in (evidence.get("flipped") or {}).items():
            known[k] = v
            last[k] = (ON_CALL if it["kind"] == "tool" else ON_CLOCK, idx)
    out = {}
    for v in verdicts:
        if not recorded or known.get(v.key) != v.passed:
            out[v.key] = Placement(AT_END)
        elif v.key not in last:
            out[v.key] = Placement(HELD)
        else:
            how, idx = last[v.key]
            out[v.key] = Placement(AT_END) if how == "gap" else Placement(how, idx)
    return out


def _when(value: Any) -> datetime | None:
    try:
        at = datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


def _calls_with_results(items: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each exchange (by item index): its text, reasoning, tokens and tool calls, each with
    the result the CLI sent back in a later request."""
    results: list[tuple[str, str, bool]] = []
    for it in items:
        if it["kind"] == "exchange":
            results.extend(exchange_results(it))
    out = {}
    for idx, it in enumerate(items):
        if it["kind"] != "exchange":
            continue
        message, usage = exchange_message(it)
        calls = []
        for c in message.get("tool_calls") or []:
            fn = c.get("function") or {}
            found = next((r for r in results if same_call(r[0], c.get("id") or "")), None)
            calls.append({
                "name": fn.get("name"), "arguments": fn.get("arguments"),
                "result": found[1] if found else None, "is_error": bool(found and found[2]),
            })  # fmt: skip
        out[idx] = {
            "text": message.get("content") or "", "reasoning": message.get("reasoning_content"),
            "calls": calls, "usage": usage,
        }  # fmt: skip
    return out


def token_totals(items: list[dict[str, Any]]) -> tuple[int, int]:
    """(prompt, completion) tokens of every model call the episode recorded: the white-box
    loop's turns and summaries, an installed agent's exchanges."""
    prompt = completion = 0
    for it in items:
        if it["kind"] in ("assistant", "compaction"):
            usage = it.get("usage") or {}
            prompt += int(usage.get("prompt_tokens") or 0)
            completion += int(usage.get("completion_tokens") or 0)
        elif it["kind"] == "exchange":
            _, usage = exchange_message(it)
            if usage is not None:
                prompt, completion = prompt + usage[0], completion + usage[1]
    return prompt, completion


def sections_of(items: list[dict[str, Any]]) -> list[Section]:
    """The timeline's sections: a new one at every move of the clock, and after an installed
    agent's invocation ended; numbered within their day."""
    sections: list[Section] = []
    day = 1
    for it in items:
        kind = it["kind"]
        if kind in HIDDEN:
            continue
        if kind == "clock":
            day = it.get("day", day)
        ended = bool(sections) and sections[-1].invoked
        if not sections or kind == "clock" or (ended and kind in ("exchange", "agent_day")):
            sections.append(Section(day))
        sections[-1].items.append(it)
        if kind == "agent_day":
            sections[-1].invoked = True
    for s in sections:
        same = [x for x in sections if x.day == s.day]
        s.number, s.of = same.index(s) + 1, len(same)
        if any(x.invoked for x in same):
            s.invoked = True
    return sections


def build(doc: dict[str, Any]) -> dict[str, Any]:
    """The template's context: sections, verdicts placed, exchanges read, totals."""
    items = [{**it, "_index": i} for i, it in enumerate(doc.get("items", []))]
    score = next((i for i in items if i["kind"] == "score"), None) or {}
    result = doc.get("result") or score
    verdicts = verdicts_of(result)
    placed = attribute(items, verdicts)
    exchanges = _calls_with_results(items)
    sections = sections_of(items)
    on_item: dict[int, list[Verdict]] = {}
    closing: list[Verdict] = []
    clocks = [(s, _when(s.items[0].get("to"))) for s in sections if s.items[0]["kind"] == "clock"]
    for v in verdicts:
        p = placed[v.key]
        v.how = p.how
        if p.at is not None:
            on_item.setdefault(p.at, []).append(v)
            continue
        frozen = _when(v.evaluated_at) if v.final and p.how == AT_END else None
        # frozen when the clock passed its time: the end of the section before that move
        mover = next((s for s, to in clocks if frozen and to and to >= frozen), None)
        where = sections.index(mover) - 1 if mover is not None else -1
        (sections[where].decided if where >= 0 else closing).append(v)
    attempts = [it for it in items if it["kind"] == "attempt"]
    prompt, completion = token_totals(items)
    return {
        "result": result, "sections": sections, "on_item": on_item, "closing": closing,
        "exchanges": exchanges, "prompt_tokens": prompt, "completion_tokens": completion,
        "attempts": max([doc.get("attempts") or 0, *(a.get("attempt", 0) for a in attempts)]),
        "checks": verdicts,
    }  # fmt: skip
