"""Canvas's error style for every failure on the Canvas routes, and the route class that
renders it (each call under its world's lock, committed before answering; a GET only reads,
except opening a conversation, which marks it read)."""

from __future__ import annotations

import logging
import re

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from services.tools.apps.canvas.actions import CanvasError
from services.tools.serial import is_http_read, world_route
from shared.errors import APIError

log = logging.getLogger("k3stack.tools.canvas")
PREFIX = "/worlds/{world_id}/canvas/api/v1"


class CanvasErrorMessage(BaseModel):
    message: str


class CanvasErrorBody(BaseModel):
    """Canvas's error body, documented in OpenAPI for every Canvas route."""

    errors: list[CanvasErrorMessage]


ERROR_MODEL = CanvasErrorBody


def _render_error(err: CanvasError) -> JSONResponse:
    headers = (
        {"WWW-Authenticate": 'Bearer realm="canvas-lms"'}
        if err.status == 401 and ("access token" in err.message)
        else None
    )
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def to_canvas_error(exc: Exception) -> CanvasError:
    if isinstance(exc, CanvasError):
        return exc
    if isinstance(exc, APIError):
        if exc.status in (401, 403):
            return CanvasError(401, f"Invalid access token. ({exc.message})")
        return CanvasError(exc.status, exc.message)
    if isinstance(exc, RequestValidationError):
        parts = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'is invalid')}"
            for e in exc.errors()[:3]
        ]
        return CanvasError(400, "; ".join(parts))
    if isinstance(exc, HTTPException):
        return CanvasError(exc.status_code, str(exc.detail))
    log.exception("unexpected error on a Canvas route")
    return CanvasError(500, "An unexpected error occurred.")


def render(exc: Exception) -> JSONResponse:
    return _render_error(to_canvas_error(exc))


def error_response(status: int, message: str) -> JSONResponse:
    """Canvas's style for failures the tools app catches outside these routes."""
    if status in (401, 403):
        return _render_error(CanvasError(401, f"Invalid access token. ({message})"))
    if status == 404:
        message = f"The specified resource does not exist. ({message})"
    return _render_error(CanvasError(status, message))


def _reads(request: Request) -> bool:
    """GETs only read, except opening a conversation, which marks it read (as Canvas does)."""
    return is_http_read(request) and not re.search(r"/conversations/[^/]+$", request.url.path)


CanvasRoute = world_route(render, reads=_reads)
