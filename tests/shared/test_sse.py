"""One SSE writer (shared/sse.py) and one reader (httpx-sse), checked by behaviour and by a scan.

The round trip pins the framing that a hand-written reader got wrong: a ``data`` value of
several lines is written as several ``data:`` lines and read back joined by ``\\n``. The scan
reads every module's syntax tree under services/, shared/, bench/ and scripts/: outside
shared/sse.py no string holds the wire framing (``data: ``, ``event: ``, ``id: `` or ``retry: ``
at a line's start: a writer), and no module that handles ``text/event-stream`` names a field
(``"data:"``, ``"event:"``, ...: a reader splitting lines by hand)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import httpx
import pytest
from httpx_sse import EventSource

from services.orchestrator.gateway import _events
from shared import sse

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("services", "shared", "bench", "scripts")
HELPER = "shared/sse.py"
FRAMING = re.compile(r"(?:^|\n)(?:data|event|id|retry): ")
FIELD = re.compile(r"(?:data|event|id|retry): ?")


def _strings(tree: ast.AST) -> list[str]:
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str | bytes):
            out.append(n.value.decode("latin-1") if isinstance(n.value, bytes) else n.value)
    return out


def hand_written_sse(source: str) -> list[str]:
    """What in ``source`` writes SSE framing or reads SSE fields by hand."""
    strings = _strings(ast.parse(source))
    found = [f"writes {s[:40]!r}" for s in strings if FRAMING.search(s)]
    if any("event-stream" in s for s in strings):
        found += [f"reads {s!r}" for s in strings if FIELD.fullmatch(s)]
    return found


def test_the_scan_finds_hand_written_writers_and_readers() -> None:
    writer = "def sse(e):\n    return f\"event: {e['type']}\\ndata: {json.dumps(e)}\\n\\n\"\n"
    done = 'DONE = "data: [DONE]\\n\\n"\n'
    reader = (
        "KIND = 'text/event-stream'\n"
        "def events(raw):\n"
        "    return [l[5:] for l in raw.splitlines() if l.startswith('data:')]\n"
    )
    data_url = "def inline(url):\n    return url.startswith('data:')\n"
    assert hand_written_sse(writer) and hand_written_sse(done) and hand_written_sse(reader)
    assert hand_written_sse(data_url) == []  # a data: URL, in a module with no event stream
    assert hand_written_sse("text = sse.json_event(e, e.get('type'))\n") == []


def test_no_sse_framing_or_parsing_outside_the_helper() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}: {what}"
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != HELPER
        for what in hand_written_sse(path.read_text())
    ]
    assert not found, f"SSE written or read outside shared/sse.py and httpx-sse: {found}"


def _read(body: str) -> list:
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    return list(EventSource(response).iter_sse())


def test_multi_line_data_round_trips_through_httpx_sse() -> None:
    text = "first line\nsecond: with a colon\r\n\nafter a blank line\rlast"
    body = sse.event(text, name="message_delta", id="7") + sse.KEEP_ALIVE
    body += sse.comment("two\nlines") + sse.json_event({"a": [1, 2]}, "done")
    # httpx-sse dispatches an empty event at every blank line once an id was seen: skipped
    first, second = [e for e in _read(body) if e.data]
    assert (first.event, first.id, first.data) == (
        "message_delta",
        "7",
        "first line\nsecond: with a colon\n\nafter a blank line\nlast",
    )
    assert (second.event, second.json()) == ("done", {"a": [1, 2]})
    assert [(e.event, e.data) for e in sse.parse(body.encode())] == [
        ("message_delta", first.data),
        ("done", '{"a": [1, 2]}'),
    ]


def test_the_writer_keeps_the_spelling_clients_saw() -> None:
    assert sse.event("[DONE]") == "data: [DONE]\n\n"
    assert sse.json_event({"type": "ping"}, "ping") == 'event: ping\ndata: {"type": "ping"}\n\n'


def test_a_field_with_a_line_break_is_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        sse.event("x", name="a\nb")
    with pytest.raises(ValueError, match="line break"):
        sse.event("x", id="1\r2")


def test_the_gateway_records_a_multi_line_event_whole() -> None:
    body = b'event: message_start\ndata: {"type":\ndata:  "message_start"}\n\n: keep-alive\n\n'
    body += b"data: [DONE]\n\n"
    assert _events(body) == [{"type": "message_start"}, "[DONE]"]
