"""How an installed CLI's output becomes events: the parsers a spec's ``output.parser`` names.

Each takes the day's stdout and stderr and returns (events, garbage): the events are mappings
with a ``type`` (the spec's ``output.ends`` and ``session.event`` name some of them), garbage
the lines that were not the CLI's format (a day with any ends ``agent_garbage``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

Events = tuple[list[dict[str, Any]], list[str]]
_SESSION_LINE = re.compile(r"^session_id:\s*(\S+)\s*$")


def parse_output(stdout: str, stderr: str = "") -> Events:
    """JSON lines, or one JSON document over many lines (OpenClaw's envelope, as an
    ``envelope`` event)."""
    events, garbage = [], []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            garbage.append(line[:200])
            continue
        (events if isinstance(value, dict) else garbage).append(value)
    if garbage:  # not JSON lines: perhaps one document over many lines
        try:
            whole = json.loads(stdout)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict):
            return [{**whole, "type": "envelope"}], []
    return events, garbage


def parse_text(stdout: str, stderr: str = "") -> Events:
    """A text stdout (Hermes's quiet mode): the final text as one ``text`` event, and the last
    ``session_id: ID`` line (Hermes prints it on stderr) as a ``session`` event, its end of
    turn; never garbage."""
    lines = stdout.rstrip().splitlines()
    found = [m for m in map(_SESSION_LINE.match, (stdout + "\n" + stderr).splitlines()) if m]
    text = "\n".join(ln for ln in lines if not _SESSION_LINE.match(ln)).strip()
    events: list[dict[str, Any]] = [{"type": "text", "text": text[-4000:]}] if text else []
    if found:
        events.append({"type": "session", "session_id": found[-1].group(1)})
    return events, []


PARSERS: dict[str, Callable[[str, str], Events]] = {
    "json-lines": parse_output,
    "text-session-line": parse_text,
}
"""By name; spec.py's PARSERS describes the same names (a test checks they agree)."""
