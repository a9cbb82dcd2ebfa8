"""Per-sandbox tokens, as E2B hands them out with every sandbox when auth is on.

``envdAccessToken`` opens the sandbox's envd data plane (``X-Access-Token``);
``trafficAccessToken`` opens its guest ports through ``get_host`` (header
``e2b-traffic-access-token``, what E2B's docs tell a client to send). Each is an HMAC of the
sandbox id under the service's API key with its own label, so one token opens one sandbox for
one purpose: a token given to a browser for a guest's web page does not run commands.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

ACCESS_HEADER = "x-access-token"
TRAFFIC_HEADER = "e2b-traffic-access-token"
KEY_HEADER = "x-api-key"


def _token(settings: Any, label: str, sandbox_id: str) -> str | None:
    key = settings.sandbox.api_key if settings.auth_enabled else None
    if not key:
        return None
    return hmac.new(key.encode(), f"{label}{sandbox_id}".encode(), hashlib.sha256).hexdigest()


def access_token(settings: Any, sandbox_id: str) -> str | None:
    """The sandbox's envd access token when auth is on (E2B's ``envdAccessToken``)."""
    return _token(settings, "", sandbox_id)


def traffic_token(settings: Any, sandbox_id: str) -> str | None:
    """The sandbox's traffic token when auth is on (E2B's ``trafficAccessToken``)."""
    return _token(settings, "traffic\0", sandbox_id)


def _matches(want: str | None, got: str | None) -> bool:
    return bool(want and got) and hmac.compare_digest(want.encode(), str(got).encode())


def traffic_refusal(settings: Any, sandbox_id: str, headers: Any) -> tuple[int, str, str] | None:
    """Why a ``get_host`` request to ``sandbox_id`` may not reach the guest, as (status, code,
    message); None when it may: auth is off, or it carries the sandbox's traffic token or the
    service's API key in ``X-API-Key`` (``Authorization`` is left to the guest's own app)."""
    if not settings.auth_enabled:
        return None
    key = settings.sandbox.api_key
    if not key:
        return 503, "auth_misconfigured", "auth is enabled but K3STACK_SANDBOX__API_KEY is not set"
    if _matches(traffic_token(settings, sandbox_id), headers.get(TRAFFIC_HEADER)):
        return None
    if _matches(key, headers.get(KEY_HEADER)):  # not Authorization: that one is the guest's
        return None
    return (
        401,
        "unauthorized",
        f"missing or wrong {TRAFFIC_HEADER} for sandbox {sandbox_id!r}: send the sandbox's "
        "trafficAccessToken (or the service's API key as X-API-Key)",
    )
