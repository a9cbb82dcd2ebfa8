"""API-key auth: one key per service, sent as ``X-API-Key`` or ``Authorization: Bearer``.

Off in local mode by default (one user on one laptop), on in deployed mode (compose, Helm);
``K3STACK_AUTH_ENABLED`` overrides either. ``/health`` and ``/metrics`` stay open so probes work.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


# Services whose management routes are keyed in every mode: the tools service's worlds hold
# the answers (oracle plans, checks) that an agent reaching the service must not read.
ALWAYS_KEYED = ("tools",)


def service_key(settings: Any, service: str) -> str:
    """The service's admin key: the configured one, else (embedded mode) one generated once
    into ``<data_dir>/keys/<service>.key`` (mode 0600), which the platform's clients read from
    the same data dir."""
    key = settings.service(service).api_key
    if key:
        return key
    path = Path(settings.data_dir) / "keys" / f"{service}.key"
    try:
        return path.read_text().strip() or _new_key(path)
    except FileNotFoundError:
        return _new_key(path)


def _new_key(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    try:
        os.link(tmp, path)  # first writer wins; a concurrent one reads the winner's key
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text().strip()


def require_admin_key(service: str) -> Callable[[Request], None]:
    """A dependency that always wants the service's admin key (:func:`service_key`),
    whatever ``auth_enabled`` says; a world's agent token is not it."""

    def check(request: Request) -> None:
        expected = service_key(request.app.state.settings, service)
        got = presented_key(request)
        if got is None:
            raise APIError(
                401,
                "unauthorized",
                f"missing admin key: send the {API_KEY_HEADER} header (the {service} service's "
                f"key, K3STACK_{service.upper()}__API_KEY or <data_dir>/keys/{service}.key)",
            )
        if not hmac.compare_digest(got.encode(), expected.encode()):
            raise APIError(403, "forbidden", "this key does not open the management routes")

    return check
