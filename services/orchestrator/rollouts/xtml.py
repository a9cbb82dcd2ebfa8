"""Reading an assistant turn the model wrote in its own chat format (XTML, the model service's
template): ``[open]tag attrs[sep] body [close]tag[sep]``, channels ``think``, ``response`` and
``tools``, each call ``[open]call tool="name" index:=i[sep]`` with typed ``arg`` elements (a
string argument raw, any other compact JSON marked ``type="json"``) or one ``json`` block.

The orchestrator talks to the model service over HTTP only, so this is its own small reader of
the completion text (markers included); it inverts what the template renders for an assistant
message, so a parsed turn rendered again in history is the same text the model generated.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN, SEP, CLOSE, END = "[open]", "[sep]", "[close]", "[end_of_msg]"
_MARKERS = re.compile(r"(\[open\]|\[sep\]|\[close\]|\[end_of_msg\])")
_MARKERS_SET = {OPEN, SEP, CLOSE, END}
_ATTR = re.compile(r"\s*([A-Za-z_][\w-]*)(:=|=)")


@dataclass
class ParsedTurn:
    """A turn's channels: reasoning, visible content and calls as {name, arguments-JSON}."""

    reasoning: str = ""
    content: str = ""
    calls: list[dict[str, str]] = field(default_factory=list)


def is_xtml(text: str) -> bool:
    return CLOSE in text or OPEN in text


def _header(header: str) -> tuple[str, dict[str, Any]]:
    """``call tool="x" index:=0`` -> ("call", {"tool": "x", "index": 0})."""
    tag, _, rest = header.strip().partition(" ")
    attrs: dict[str, Any] = {}
    dec = json.JSONDecoder()
    pos = 0
    while m := _ATTR.match(rest, pos):
        try:
            value, pos = dec.raw_decode(rest, m.end())
        except json.JSONDecodeError:
            break
        attrs[m.group(1)] = value
    return tag, attrs


def _arguments(args: list[tuple[str, bool, str]], raw: str | None) -> str:
    if raw is not None:
        return raw
    out: dict[str, Any] = {}
    for name, is_json, body in args:
        if is_json:
            try:
                out[name] = json.loads(body)
            except json.JSONDecodeError:
                out[name] = body
        else:
            out[name] = body
    return json.dumps(out, ensure_ascii=False)


def parse_turn(text: str, first_channel: str | None = None) -> ParsedTurn:
    """The turn in ``text``: what the model generated after the generation prefix opened
    ``first_channel`` (found from the first ``[close]`` when not given). A turn cut short
    keeps what was complete."""
    parts = [p for p in _MARKERS.split(text) if p]
    turn = ParsedTurn()
    # the element stack: (tag, attrs, text); the prefix already opened the first channel
    stack: list[list[Any]] = [[first_channel or "", {}, ""]]
    call_args: list[tuple[str, bool, str]] = []
    call_raw: str | None = None
    i = 0
    while i < len(parts):
        piece = parts[i]
        if piece in (OPEN, CLOSE):
            header = parts[i + 1] if i + 1 < len(parts) and parts[i + 1] not in _MARKERS_SET else ""
            i += 2 if header else 1
            if i < len(parts) and parts[i] == SEP:
                i += 1
            tag, attrs = _header(header)
            if piece == OPEN:
                stack.append([tag, attrs, ""])
                if tag == "call":
                    call_args, call_raw = [], None
                continue
            if not stack:
                continue
            top_tag, top_attrs, body = stack.pop()
            name = top_tag or tag
            if name == "think":
                turn.reasoning += body
            elif name == "response":
                turn.content += body
            elif name == "arg":
                call_args.append((str(top_attrs.get("name", "")),
                                  top_attrs.get("type") == "json", body))  # fmt: skip
            elif name == "json":
                call_raw = body
            elif name == "call":
                turn.calls.append({"name": str(top_attrs.get("tool", "")),
                                   "arguments": _arguments(call_args, call_raw)})  # fmt: skip
            continue
        if piece == END:
            break
        if piece != SEP and stack:
            stack[-1][2] += piece
        i += 1
    if stack and stack[0][0] == "" and len(stack) == 1 and stack[0][2]:
        turn.content += stack[0][2]  # no markers at all: plain text is the content
    return turn
