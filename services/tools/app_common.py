"""What several apps' routes share, written once: a JSON-object request body read in the app's
own error style, and the error body models of Google's APIs (Gmail, Calendar)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from pydantic import BaseModel, create_model


def json_object_body(
    not_json: Callable[[], Exception], not_object: Callable[[], Exception]
) -> Callable[[Request], Awaitable[dict[str, Any]]]:
    """A route dependency reading the body as a JSON object (``{}`` when empty); a body that is
    not JSON raises ``not_json()``, one that is JSON but not an object ``not_object()``."""

    async def json_body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise not_json() from None
        if not isinstance(body, dict):
            raise not_object()
        return body

    return json_body


def google_error_model(api: str) -> type[BaseModel]:
    """``<api>ErrorBody``: the error body Google APIs answer (``{"error": {code, message,
    errors, status}}``), named for the app so each app's OpenAPI document keeps its own."""
    detail = create_model(f"{api}ErrorDetail", message=str, domain=str, reason=str)
    inner = create_model(
        f"{api}ErrorInner",
        code=int,
        message=str,
        errors=(list[detail], []),  # type: ignore[valid-type]
        status=(str | None, None),
    )
    return create_model(
        f"{api}ErrorBody",
        __doc__=(
            'The error body Google APIs answer (``{"error": {code, message, errors, status}}``),\n'
            f"    documented in OpenAPI for every {api} route."
        ),
        error=inner,
    )
