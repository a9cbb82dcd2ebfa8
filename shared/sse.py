"""Server-sent events: the one writer of the wire format, and the one reader (httpx-sse).

Every stream the platform serves (the model's chat, Responses and Messages APIs, the sandbox's
exec stream, the agent gateway's answers) is framed by :func:`event`; every SSE body read back
(the gateway records a stream's events) is parsed by httpx-sse, never by hand. A ``data`` value
of several lines goes out as one ``data:`` line each and comes back joined by ``\\n``, as the
HTML standard's parser does (a hand-written reader that kept only single lines lost them).
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
KEEP_ALIVE = ": keep-alive\n\n"
"""A comment line: keeps an idle connection open through proxies; readers skip it."""


def event(data: str, name: str | None = None, id: str | None = None) -> str:  # noqa: A002
    """One event: its ``event:`` and ``id:`` lines where given, ``data`` over as many ``data:``
    lines as it has lines, and the blank line that ends it."""
    for field, value in (("event", name), ("id", id)):
        if value is not None and _LINE_BREAK.search(value):
            raise ValueError(f"an SSE {field} cannot hold a line break: {value!r}")
    head = (f"event: {name}\n" if name is not None else "") + (
        f"id: {id}\n" if id is not None else ""
    )
    return head + "".join(f"data: {line}\n" for line in _LINE_BREAK.split(data)) + "\n"


def json_event(obj: Any, name: str | None = None) -> str:
    """:func:`event` of ``obj`` as JSON (``json.dumps``'s default spelling)."""
    return event(json.dumps(obj), name)


def comment(text: str) -> str:
    """A comment (``: text``, one line each), which every reader skips."""
    return "".join(f": {line}\n" for line in _LINE_BREAK.split(text)) + "\n"


def parse(body: bytes) -> list[ServerSentEvent]:
    """The events of a whole SSE body, read by httpx-sse; an event with no data is not
    dispatched (the standard's rule), comments are skipped."""
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    return [e for e in EventSource(response).iter_sse() if e.data]
