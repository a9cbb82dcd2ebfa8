"""Bounds on what a request body may be, checked once before any app parses it.

A JSON body nested a few hundred levels deep (a calendar event's ``extendedProperties``, a
Slack message's ``blocks``) parsed fine and then broke whatever walked it next (pydantic's
serialiser, ``json.dumps``, the state export): a 500. Every app would need its own guard, so
the tools service checks each body here instead: too large is a 413, nested deeper than the
limit a 400 naming the depth, both in the app's own error style. Form fields that hold JSON
(Slack's ``blocks`` and ``attachments``) are checked the same way; a JSON string that reaches
an app by another road (a multipart field, the query string) goes through
:func:`check_json_text` where the app parses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import parse_qsl

from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from shared.asgi_body import Cut, content_length, read_capped, replaying

# A JSON string (escapes included) or one bracket: the scanner never looks inside strings.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPEN = frozenset(b"[{")

DEFAULT_DEPTH = 64  # K3STACK_TOOLS__MAX_JSON_DEPTH's default
Refuse = Callable[[str, int, str], Response]


class BodyTooDeep(ValueError):
    """A JSON document nested deeper than the limit (the message names both depths)."""


def json_depth_over(data: bytes, limit: int) -> int | None:
    """The depth ``data`` reaches once it passes ``limit`` (None if it never does).

    Iterative and string-aware, so it costs nothing like the recursion it guards against; a
    body with no more brackets than the limit cannot pass it and is not scanned at all."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return None
    depth = 0
    for match in _TOKENS.finditer(data):
        token = match.group()
        if len(token) != 1:
            continue  # a string
        if token[0] in _OPEN:
            depth += 1
            if depth > limit:
                return depth
        else:
            depth -= 1
    return None


def depth_message(limit: int, where: str = "the request body") -> str:
    return f"{where} nests JSON more than {limit} levels deep; flatten it (the limit is {limit})"


def check_json_text(text: str | bytes, limit: int, where: str = "the request body") -> None:
    """Raise :class:`BodyTooDeep` when ``text`` (JSON about to be parsed) nests past ``limit``."""
    data = text.encode() if isinstance(text, str) else text
    if json_depth_over(data, limit) is not None:
        raise BodyTooDeep(depth_message(limit, where))


def _media_type(scope: Scope) -> str:
    for key, value in scope.get("headers", ()):
        if key == b"content-type":
            return value.decode("latin-1").split(";")[0].strip().lower()
    return ""


def body_problem(media_type: str, body: bytes, max_depth: int) -> str | None:
    """What is wrong with ``body`` (None if nothing): JSON bodies (and bodies that declare no
    type, which FastAPI parses as JSON) whole; form bodies field by field, the fields that
    hold JSON (those starting with ``[`` or ``{``)."""
    if media_type in ("", "application/json") or media_type.endswith("+json"):
        if json_depth_over(body, max_depth) is not None:
            return depth_message(max_depth)
    elif media_type == "application/x-www-form-urlencoded":
        lowered = body.lower()
        opens = sum(lowered.count(b) for b in (b"%5b", b"%7b", b"[", b"{"))
        if opens <= max_depth:
            return None
        for name, value in parse_qsl(body.decode("latin-1"), keep_blank_values=True):
            if value.lstrip()[:1] in ("[", "{") and json_depth_over(value.encode(), max_depth):
                return depth_message(max_depth, f"field {name!r}")
    return None


class BodyBounds:
    """ASGI middleware: 413 for a body over ``max_bytes`` (before reading it when declared), 400
    for JSON nested deeper than ``max_depth``; a body within both is handed on whole."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_depth: int, refuse: Refuse) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        too_large = (
            f"request body is larger than this server's limit of {self.max_bytes} bytes "
            "(K3STACK_TOOLS__MAX_BODY_BYTES)"
        )
        declared = content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self.refuse(scope["path"], 413, too_large)(scope, receive, send)
            return
        body = await read_capped(receive, self.max_bytes)
        if body is Cut.GONE:
            return
        if body is Cut.TOO_LARGE:
            await self.refuse(scope["path"], 413, too_large)(scope, receive, send)
            return
        problem = body_problem(_media_type(scope), body, self.max_depth)
        if problem is not None:
            await self.refuse(scope["path"], 400, problem)(scope, receive, send)
            return
        await self.app(scope, replaying(body, receive), send)


def json_depth_limit(request: HTTPConnection) -> int:
    """The service's JSON depth limit (its settings; the default where an app runs bare)."""
    settings = getattr(request.app.state, "settings", None)
    tools = getattr(settings, "tools", None)
    return int(getattr(tools, "max_json_depth", DEFAULT_DEPTH))
