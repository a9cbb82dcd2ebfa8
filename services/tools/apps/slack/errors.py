"""Slack's error style, for every failure on the Slack routes.

Slack answers HTTP 200 with ``{"ok": false, "error": "<code>"}`` (plus ``response_metadata``
messages for argument problems). :class:`SlackRoute` turns every exception raised on a Slack
route — including world-token failures and request validation — into that body, after rolling
back the world's session so a failed call leaves no partial write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from services.tools.mcp.serial import run_world_call
from shared.errors import APIError

log = logging.getLogger("k3stack.tools.slack")


class SlackError(Exception):
    """A Slack API error code (``channel_not_found``, ``not_in_channel``, ...)."""

    def __init__(self, error: str, detail: str = "", status: int = 200) -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.detail = detail
        self.status = status

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": False, "error": self.error}
        if self.detail:
            body["response_metadata"] = {"messages": [f"[ERROR] {self.detail}"]}
        return body


_AUTH_ERRORS = {401: "not_authed", 403: "invalid_auth", 404: "invalid_auth"}


def to_slack_error(exc: Exception) -> SlackError:
    """Map any exception raised on a Slack route to the error Slack would answer with."""
    if isinstance(exc, SlackError):
        return exc
    if isinstance(exc, APIError):
        return SlackError(_AUTH_ERRORS.get(exc.status, "invalid_arguments"), exc.message)
    if isinstance(exc, RequestValidationError):
        return SlackError("invalid_arguments", str(exc.errors()[:3]))
    if isinstance(exc, HTTPException):
        return SlackError("invalid_arguments", str(exc.detail))
    log.exception("unexpected error on a Slack route")
    return SlackError("internal_error", status=500)


def rollback_world(request: Request) -> None:
    """Undo the world's uncommitted writes (the context dependency stored it on the request)."""
    ctx = getattr(request.state, "world_ctx", None)
    if ctx is not None:
        ctx.session.rollback()


class SlackRoute(APIRoute):
    """An APIRoute whose failures come back in Slack's ``{"ok": false}`` style."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await run_world_call(request, handler)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a Slack error body
                rollback_world(request)
                err = to_slack_error(exc)
                return JSONResponse(err.body(), status_code=err.status)

        return route
