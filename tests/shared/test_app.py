"""The app factory every service is built with: health, metrics, errors, auth, OpenAPI."""

from __future__ import annotations

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient
from openapi_spec_validator import validate
from pydantic import BaseModel, Field

from shared.app import create_app
from shared.errors import APIError
from shared.settings import load_settings

router = APIRouter()


class Item(BaseModel):
    name: str = Field(min_length=1)
    count: int = Field(ge=0)


@router.post("/items", response_model=Item)
def create_item(item: Item) -> Item:
    if item.name == "taken":
        raise APIError(409, "conflict", "item 'taken' already exists")
    if item.name == "boom":
        raise RuntimeError("unexpected")
    return item


def make(**settings) -> TestClient:
    app = create_app("tools", routers=[router], settings=load_settings(**settings))
    return TestClient(app, raise_server_exceptions=False)


def test_health_and_metrics_count_requests():
    c = make()
    assert c.get("/health").json()["status"] == "ok"
    c.post("/items", json={"name": "a", "count": 1})
    c.post("/items", json={"name": "", "count": 1})
    text = c.get("/metrics").text
    assert (
        'k3stack_tools_http_requests_total{method="POST",route="/items",status="200"} 1.0' in text
    )
    assert (
        'k3stack_tools_http_requests_total{method="POST",route="/items",status="400"} 1.0' in text
    )


def test_validation_errors_are_400_naming_the_field():
    r = make().post("/items", json={"name": "x", "count": -1})
    assert r.status_code == 400
    body = r.json()
    assert body["error_code"] == "invalid_request"
    assert "count" in body["message"]


def test_api_errors_and_crashes_share_the_error_shape():
    c = make()
    r = c.post("/items", json={"name": "taken", "count": 0})
    assert r.status_code == 409
    assert r.json() == {
        "code": 409,
        "error_code": "conflict",
        "message": "item 'taken' already exists",
    }
    r = c.post("/items", json={"name": "boom", "count": 0})
    assert r.status_code == 500
    assert r.json()["error_code"] == "internal"
    r = c.get("/nowhere")
    assert r.status_code == 404 and r.json()["error_code"] == "not_found"


def test_auth_off_in_local_mode_on_when_enabled():
    assert make().post("/items", json={"name": "a", "count": 1}).status_code == 200
    c = make(auth_enabled=True, tools={"api_key": "sekret"})
    r = c.post("/items", json={"name": "a", "count": 1})
    assert r.status_code == 401 and "X-API-Key" in r.json()["message"]
    assert (
        c.post("/items", json={"name": "a", "count": 1}, headers={"X-API-Key": "wrong"}).status_code
        == 401
    )
    assert (
        c.post(
            "/items", json={"name": "a", "count": 1}, headers={"X-API-Key": "sekret"}
        ).status_code
        == 200
    )
    assert (
        c.post(
            "/items", json={"name": "a", "count": 1}, headers={"Authorization": "Bearer sekret"}
        ).status_code
        == 200
    )
    # Probes stay open; the metrics and the API's description take the key.
    assert c.get("/health").status_code == 200
    assert c.get("/health/ready").status_code == 200
    for path in ("/metrics", "/openapi.json", "/docs", "/redoc"):
        assert c.get(path).status_code == 401, path
        assert c.get(path, headers={"Authorization": "Bearer sekret"}).status_code == 200, path
    assert "/items" in c.get("/openapi.json", headers={"X-API-Key": "sekret"}).json()["paths"]


def test_health_without_the_key_says_only_up_or_down():
    """Check details name internal hosts and carry error texts: only a keyed caller sees them."""

    def store_down() -> dict[str, str]:
        raise ConnectionError("db.internal.example:5432 refused: password authentication failed")

    app = create_app(
        "tools",
        routers=[router],
        settings=load_settings(auth_enabled=True, tools={"api_key": "sekret"}),
        health_checks={"database": store_down, "cache": lambda: {"host": "cache.internal"}},
    )
    c = TestClient(app, raise_server_exceptions=False)
    for path in ("/health", "/health/ready"):
        open_ = c.get(path)
        assert open_.status_code == (200 if path == "/health" else 503)
        assert open_.json()["status"] == "degraded"
        checks = open_.json()["checks"]
        assert checks["database"] == "down" and checks["cache"] == "up"
        assert "internal" not in open_.text and "password" not in open_.text
        keyed = c.get(path, headers={"X-API-Key": "sekret"}).json()["checks"]
        assert "password authentication failed" in keyed["database"]["error"]
        assert keyed["cache"] == {"host": "cache.internal"}
        wrong = c.get(path, headers={"X-API-Key": "nope"})
        assert "internal" not in wrong.text


def test_settings_open_the_docs_and_the_metrics():
    c = make(auth_enabled=True, tools={"api_key": "sekret"}, public_docs=True)
    assert c.get("/openapi.json").status_code == 200 and c.get("/docs").status_code == 200
    assert c.get("/metrics").status_code == 401
    c = make(auth_enabled=True, tools={"api_key": "sekret"}, public_metrics=True)
    assert c.get("/metrics").status_code == 200 and c.get("/openapi.json").status_code == 401


def test_auth_enabled_without_a_key_says_which_variable():
    r = make(auth_enabled=True).post("/items", json={"name": "a", "count": 1})
    assert r.status_code == 503
    assert "K3STACK_TOOLS__API_KEY" in r.json()["message"]


def test_openapi_is_valid_and_documents_400_not_422():
    doc = make().get("/openapi.json").json()
    validate(doc)
    responses = doc["paths"]["/items"]["post"]["responses"]
    assert "422" not in responses
    assert responses["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")


@pytest.mark.parametrize("service", ["model", "sandbox", "tools", "verifier", "orchestrator"])
def test_every_service_has_health_metrics_and_valid_openapi(service):
    import importlib

    module = importlib.import_module(f"services.{service}.app")
    with TestClient(module.create_app()) as c:
        health = c.get("/health").json()
        assert health["service"] == service and health["status"] == "ok"
        assert c.get("/metrics").status_code == 200
        doc = c.get("/openapi.json").json()
        validate(doc)
        assert len(doc["paths"]) >= 3, "each service has at least one real endpoint"
