"""The model service's OpenAPI document: every route other services call answers a typed model."""

from __future__ import annotations

from services.model.app import create_app
from tests.model.conftest import model_settings

# Routes whose 200 is not JSON by design.
NOT_JSON = {("get", "/metrics")}


def test_every_route_has_a_typed_response_model():
    spec = create_app(model_settings()).openapi()
    untyped = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if (method, path) in NOT_JSON:
                continue
            ok = op["responses"].get("200", {})
            schema = ok.get("content", {}).get("application/json", {}).get("schema", {})
            if "$ref" not in schema:
                untyped.append(f"{method.upper()} {path}")
    assert not untyped, f"routes without a response model: {untyped}"


def test_the_api_surface_is_published():
    paths = set(create_app(model_settings()).openapi()["paths"])
    assert {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/models",
        "/v1/models/{model_id}",
        "/v1/tokenize",
        "/v1/detokenize",
        "/health",
    } <= paths
