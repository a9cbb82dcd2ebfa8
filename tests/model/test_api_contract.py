"""The model service's OpenAPI document publishes its whole API surface (typing and drift are
guarded for every service by tests/contract/test_openapi.py)."""

from __future__ import annotations

from services.model.app import create_app
from tests.model.conftest import model_settings


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
