"""API-key auth: one key per service, sent as ``X-API-Key`` or ``Authorization: Bearer``.

Off in local mode by default (one user on one laptop), on in deployed mode (compose, Helm);
``K3STACK_AUTH_ENABLED`` overrides either. ``/health`` and ``/metrics`` stay open so probes work.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import Request

from shared.errors import APIError

API_KEY_HEADER = "X-API-Key"


def presented_key(request: Request) -> str | None:
    key = request.headers.get(API_KEY_HEADER)
    if key:
        return key
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return None


def require_api_key(service: str) -> Callable[[Request], None]:
    """A dependency that rejects requests without the service's key when auth is enabled."""

    def check(request: Request) -> None:
        settings = request.app.state.settings
        if not settings.auth_enabled:
            return
        expected = settings.service(service).api_key
        if not expected:
            raise APIError(
                503,
                "auth_misconfigured",
                f"auth is enabled but K3STACK_{service.upper()}__API_KEY is not set",
            )
        got = presented_key(request)
        if got is None:
            raise APIError(
                401, "unauthorized", f"missing API key: send the {API_KEY_HEADER} header"
            )
        if not hmac.compare_digest(got.encode(), expected.encode()):
            raise APIError(401, "unauthorized", "invalid API key")

    return check
