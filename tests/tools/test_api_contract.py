"""Contract first: ``services/tools/openapi.yaml`` is the management API (worlds, clock,
events, checks, scenarios) other services call; the app must match it, every one of those
routes answers a typed model (no untyped ``object`` bodies), and the spec is valid OpenAPI 3.
"""

from __future__ import annotations

import yaml
from openapi_spec_validator import validate

from services.tools.openapi_contract import SPEC, live_spec


def test_spec_is_valid_openapi() -> None:
    validate(yaml.safe_load(SPEC.read_text()))


def test_app_matches_committed_spec() -> None:
    spec, live = yaml.safe_load(SPEC.read_text()), live_spec()
    assert set(spec["paths"]) == set(live["paths"]), (
        f"only in spec: {sorted(set(spec['paths']) - set(live['paths']))}; "
        f"only in app: {sorted(set(live['paths']) - set(spec['paths']))}"
    )
    drift = [p for p in spec["paths"] if spec["paths"][p] != live["paths"][p]]
    assert not drift, (
        f"operations differ from openapi.yaml at {drift} (regenerate: python -m services.tools.openapi_contract)"
    )
    a, b = spec["components"]["schemas"], live["components"]["schemas"]
    drift = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    assert not drift, f"schemas differ from openapi.yaml: {drift}"


def test_every_success_body_is_a_named_model() -> None:
    """No management route answers a bare dict: each 2xx JSON body is a $ref to a model
    from shared.contracts.tools (or a list of them)."""
    import shared.contracts.tools as contract

    spec = yaml.safe_load(SPEC.read_text())
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for status, resp in op["responses"].items():
                if not status.startswith("2") or "content" not in resp:
                    continue
                schema = resp["content"]["application/json"]["schema"]
                ref = schema.get("$ref") or schema.get("items", {}).get("$ref")
                assert ref, f"{method.upper()} {path} {status} answers an untyped body"
                assert hasattr(contract, ref.rsplit("/", 1)[1]), ref


def test_unsupported_methods_are_405_with_allow(tools_client) -> None:  # type: ignore[no-untyped-def]
    """TRACE (or any method a path does not take) is a 405 naming the methods it does take,
    on the management routes and on every app's routes, in the app's error style."""
    from tests.tools.conftest import create_world

    w = create_world(tools_client)
    paths = [
        "/worlds",
        f"/worlds/{w.id}/clock",
        f"/worlds/{w.id}/slack/api/chat.postMessage",
        f"/worlds/{w.id}/gmail/v1/users/me/profile",
        f"/worlds/{w.id}/notion/v1/search",
        f"/worlds/{w.id}/calendar/v3/users/me/calendarList",
    ]
    for path in paths:
        for method in ("TRACE", "PUT"):
            resp = tools_client.request(method, path, headers=w.auth)
            assert resp.status_code == 405, (method, path, resp.status_code, resp.text)
            allow = {m.strip() for m in resp.headers.get("allow", "").split(",") if m.strip()}
            assert allow and method not in allow, (method, path, resp.headers)
