"""Reading a request body under a size cap in ASGI middleware, then handing it on.

The model, tools and verifier services each refuse a body over their limit before the app sees
it: a declared ``Content-Length`` over the cap is refused without reading a byte, a chunked body
is read up to the cap and refused the moment it passes it, and a body within it is replayed to the
app whole. This module is that mechanism once; each service keeps its own error envelope.
"""

from __future__ import annotations

import enum

from starlette.types import Message, Receive, Scope


class Cut(enum.Enum):
    """Why no body came back: the client left mid-body, or the body passed the cap."""

    GONE = "gone"
    TOO_LARGE = "too_large"


def content_length(scope: Scope) -> int | None:
    """The request's declared ``Content-Length``, or None (absent or not a number)."""
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_capped(receive: Receive, max_bytes: int) -> bytes | Cut:
    """The whole body, or why not: never more than ``max_bytes`` (plus one chunk) is held."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left mid-body
            return Cut.GONE
        body += message.get("body", b"")
        if len(body) > max_bytes:
            return Cut.TOO_LARGE
        if not message.get("more_body", False):
            return bytes(body)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app ``body`` whole, then waits for the disconnect as usual."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
