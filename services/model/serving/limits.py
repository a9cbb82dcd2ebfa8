"""A request-body size limit for the model API, enforced before the app sees the body.

A declared ``Content-Length`` over the limit is answered 413 at once, without reading a byte; a
body without one (chunked) is read up to the limit and refused the moment it passes it. A body
within the limit is handed on whole, which is what the JSON routes would read anyway. Either way
the event loop never buffers or parses more than the limit, so ``/health`` stays responsive while
a huge body is refused.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from services.model.serving.messages_api import error_body
from services.model.serving.protocol import OpenAIError
from shared.asgi_body import Cut, content_length, read_capped, replaying


class BodySizeLimit:
    """ASGI middleware: 413 in OpenAI's error envelope for bodies over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, send)
            return
        body = await read_capped(receive, self.max_bytes)
        if body is Cut.TOO_LARGE:
            await self._refuse(scope, send)
        elif body is not Cut.GONE:
            await self.app(scope, replaying(body, receive), send)

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
