"""Domain errors to HTTP, once: every route and the envd data plane use this mapping."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from services.sandbox.lifecycle.errors import (
    Conflict,
    Internal,
    Invalid,
    NotFound,
    SandboxError,
    TooLarge,
    Unavailable,
)
from shared.errors import APIError, Error

STATUS: dict[type[SandboxError], int] = {
    NotFound: 404, Invalid: 400, Conflict: 409, TooLarge: 413, Unavailable: 503, Internal: 500,
}  # fmt: skip


def status_of(exc: SandboxError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]  # type: ignore[index]
    return 500


def to_api_error(exc: SandboxError) -> APIError:
    return APIError(status_of(exc), exc.error_code, exc.message)


def to_error(exc: SandboxError) -> Error:
    return to_api_error(exc).to_error()


async def handle_sandbox_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SandboxError)
    err = to_error(exc)
    return JSONResponse(err.model_dump(), status_code=err.code)
