"""A request-body size limit for the model API, enforced before the app sees the body.

A declared ``Content-Length`` over the limit is answered 413 at once, without reading a byte; a
body without one (chunked) is read up to the limit and refused the moment it passes it. A body
within the limit is handed on whole, which is what the JSON routes would read anyway. Either way
the event loop never buffers or parses more than the limit, so ``/health`` stays responsive while
a huge body is refused.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.model.serving.messages_api import error_body
from services.model.serving.protocol import OpenAIError


class BodySizeLimit:
    """ASGI middleware: 413 in OpenAI's error envelope for bodies over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left mid-body
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(scope, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # later calls: wait for the disconnect, as usual

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        message = (
            f"request body is larger than this server's limit of {self.max_bytes} bytes "
            "(K3STACK_MODEL__MAX_BODY_BYTES)"
        )
        if scope["path"].startswith("/v1/messages"):  # Anthropic's envelope there
            body = json.dumps(error_body(413, message)).encode()
        else:
            body = (
                OpenAIError(413, message, code="body_too_large").body().model_dump_json().encode()
            )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
