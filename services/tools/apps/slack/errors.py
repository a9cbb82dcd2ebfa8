"""Slack's error style, for every failure on the Slack routes.

Slack answers HTTP 200 with ``{"ok": false, "error": "<code>"}`` (plus ``response_metadata``
messages for argument problems). :class:`SlackRoute` turns every exception raised on a Slack
route — including world-token failures and request validation — into that body, after rolling
back the world's session so a failed call leaves no partial write.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from services.tools.serial import world_route
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
    if isinstance(exc, APIError) and exc.error_code == "token_in_query":
        # Slack refuses tokens in the query string (since 2021); a 4xx, so no client takes
        # the refusal for an answer.
        return SlackError("invalid_auth", exc.message, status=400)
    if isinstance(exc, APIError):
        return SlackError(_AUTH_ERRORS.get(exc.status, "invalid_arguments"), exc.message)
    if isinstance(exc, RequestValidationError):
        return SlackError("invalid_arguments", str(exc.errors()[:3]))
    if isinstance(exc, HTTPException):
        return SlackError("invalid_arguments", str(exc.detail))
    log.exception("unexpected error on a Slack route")
    return SlackError("internal_error", status=500)


def render(exc: Exception) -> JSONResponse:
    """A failure in Slack's ``{"ok": false}`` style."""
    err = to_slack_error(exc)
    return JSONResponse(err.body(), status_code=err.status)


# Web API methods that only read (Slack takes them as POST too): answered, never committed.
READ_METHODS = frozenset(
    """api.test auth.test bots.info chat.getPermalink chat.scheduledMessages.list
    conversations.history conversations.info conversations.list conversations.members
    conversations.replies emoji.list files.info files.list pins.list reactions.get
    reactions.list search.messages team.info users.conversations users.getPresence users.info
    users.list users.lookupByEmail users.profile.get""".split()
)


def is_read(request: Request) -> bool:
    return request.url.path.rsplit("/", 1)[-1] in READ_METHODS


SlackRoute = world_route(render, reads=is_read)
