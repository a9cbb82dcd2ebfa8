"""Google's error style for every failure on the Calendar routes.

``{"error": {"code": 404, "message": "Not Found", "status": "NOT_FOUND",
"errors": [{"domain": "global", "reason": "notFound", "message": "Not Found"}]}}`` — what
``googleapiclient.errors.HttpError`` parses. :class:`GoogleRoute` renders every exception raised
on a Calendar route that way, after rolling back the world's session.
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

log = logging.getLogger("k3stack.tools.calendar")

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    410: "NOT_FOUND",
    500: "INTERNAL",
}


class GoogleError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "errors": [{"domain": "global", "reason": self.reason, "message": self.message}],
                "code": self.code,
                "message": self.message,
                "status": _STATUS.get(self.code, "UNKNOWN"),
            }
        }


def bad_request(message: str, reason: str = "invalid") -> GoogleError:
    return GoogleError(400, reason, message)


def not_found() -> GoogleError:
    return GoogleError(404, "notFound", "Not Found")


def to_google_error(exc: Exception) -> GoogleError:
    if isinstance(exc, GoogleError):
        return exc
    if isinstance(exc, APIError):
        if exc.status in (401, 403, 404):
            return GoogleError(401, "authError", f"Invalid Credentials ({exc.message})")
        return GoogleError(exc.status, "invalid", exc.message)
    if isinstance(exc, RequestValidationError):
        parts = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
            for e in exc.errors()[:3]
        ]
        return bad_request("Invalid value: " + "; ".join(parts))
    if isinstance(exc, HTTPException):
        return GoogleError(exc.status_code, "invalid", str(exc.detail))
    log.exception("unexpected error on a Calendar route")
    return GoogleError(500, "backendError", "Backend Error")


def render(exc: Exception) -> JSONResponse:
    """A failure in Google's error shape."""
    err = to_google_error(exc)
    return JSONResponse(err.body(), status_code=err.code)


def is_read(request: Request) -> bool:
    """GETs and free/busy queries (a POST that only reads)."""
    return is_http_read(request) or request.url.path.endswith("/freeBusy")


GoogleRoute = world_route(render, reads=is_read)
