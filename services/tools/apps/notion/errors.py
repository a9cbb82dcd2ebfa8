"""Notion's error style for every failure on the Notion routes.

Notion answers ``{"object": "error", "status": <http>, "code": "<code>", "message": "..."}``
(codes ``validation_error``, ``object_not_found``, ``invalid_json``, ``missing_version``,
``unauthorized``, ...). :class:`NotionRoute` renders every exception raised on a Notion route —
world-token failures and request validation included — in that shape, after rolling back the
world's session so a failed call writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from services.tools.serial import is_http_read, world_route
from shared.errors import APIError

log = logging.getLogger("k3stack.tools.notion")


class NotionError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, Any]:
        return {
            "object": "error",
            "status": self.status,
            "code": self.code,
            "message": self.message,
        }


def validation(message: str) -> NotionError:
    return NotionError(400, "validation_error", message)


def not_found(object_id: str, kind: str = "block") -> NotionError:
    return NotionError(
        404,
        "object_not_found",
        f"Could not find {kind} with ID: {object_id}. Make sure the relevant pages and databases "
        "are shared with your integration.",
    )


_API_CODES = {401: "unauthorized", 403: "unauthorized", 404: "unauthorized"}


def to_notion_error(exc: Exception) -> NotionError:
    if isinstance(exc, NotionError):
        return exc
    if isinstance(exc, APIError):
        if exc.status in _API_CODES:
            return NotionError(401, "unauthorized", f"API token is invalid. ({exc.message})")
        return NotionError(exc.status, "invalid_request", exc.message)
    if isinstance(exc, RequestValidationError):
        if any(
            e.get("type") == "missing" and tuple(e.get("loc", ())) == ("header", "Notion-Version")
            for e in exc.errors()
        ):
            return NotionError(
                400,
                "missing_version",
                "Notion-Version header failed validation: Notion-Version header should be "
                "defined, instead was `undefined`.",
            )
        parts = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))} {e.get('msg', 'is invalid')}"
            for e in exc.errors()[:3]
        ]
        return validation("body failed validation: " + "; ".join(parts))
    if isinstance(exc, HTTPException):
        code = "invalid_request_url" if exc.status_code == 404 else "invalid_request"
        return NotionError(exc.status_code, code, str(exc.detail))
    log.exception("unexpected error on a Notion route")
    return NotionError(500, "internal_server_error", "Unexpected error.")


def render(exc: Exception) -> JSONResponse:
    """A failure as Notion's error object."""
    err = to_notion_error(exc)
    return JSONResponse(err.body(), status_code=err.status)


def is_read(request: Request) -> bool:
    """GETs, search, and database / data-source queries (POSTs that only read)."""
    path = request.url.path
    return is_http_read(request) or path.endswith(("/v1/search", "/query"))


NotionRoute = world_route(render, reads=is_read)
