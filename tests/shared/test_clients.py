"""The typed clients against a real HTTP server: errors carry the service's message, retries
happen only for idempotent calls."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi import APIRouter

from shared.app import create_app
from shared.clients import AsyncServiceClient, ServiceClient, ServiceError, VerifierClient
from shared.errors import APIError
from shared.settings import load_settings

calls: Counter[str] = Counter()
router = APIRouter()


@router.get("/flaky")
def flaky() -> dict:
    calls["GET /flaky"] += 1
    if calls["GET /flaky"] < 3:
        raise APIError(503, "busy", "try again")
    return {"ok": True, "attempts": calls["GET /flaky"]}


@router.post("/flaky")
def flaky_post() -> dict:
    calls["POST /flaky"] += 1
    raise APIError(503, "busy", "try again")


@router.get("/missing/{name}")
def missing(name: str) -> dict:
    raise APIError(404, "not_found", f"thing {name!r} does not exist")


@router.post("/jobs")
def bad_job(body: dict) -> dict:
    raise APIError(400, "invalid_request", "kind 'nope' is not a job kind")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _serve(app) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """Run ``app`` on a real loopback port; yields its base URL."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "test server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


@pytest.fixture(scope="module")
def server_url():
    with _serve(create_app("verifier", routers=[router], settings=load_settings())) as url:
        yield url


@pytest.fixture(autouse=True)
def _reset_calls():
    calls.clear()


def test_4xx_surfaces_with_the_service_message(server_url):
    with ServiceClient(server_url) as c:
        c.service = "verifier"
        with pytest.raises(ServiceError) as err:
            c.get_json("/missing/widget")
    e = err.value
    assert (e.status, e.error_code, e.service) == (404, "not_found", "verifier")
    assert e.message == "thing 'widget' does not exist"
    assert "GET /missing/widget" in str(e)


def test_typed_client_raises_on_bad_request(server_url):
    with VerifierClient(server_url) as c, pytest.raises(ServiceError) as err:
        c.create_job("nope", {})
    assert err.value.status == 400 and "not a job kind" in err.value.message


def test_idempotent_calls_are_retried(server_url):
    with ServiceClient(server_url, retries=3, backoff_s=0.01) as c:
        assert c.get_json("/flaky") == {"ok": True, "attempts": 3}
    assert calls["GET /flaky"] == 3


def test_non_idempotent_calls_are_not_retried(server_url):
    with (
        ServiceClient(server_url, retries=3, backoff_s=0.01) as c,
        pytest.raises(ServiceError) as err,
    ):
        c.post_json("/flaky", {})
    assert err.value.status == 503
    assert calls["POST /flaky"] == 1


def test_retries_are_bounded(server_url):
    with ServiceClient(server_url, retries=1, backoff_s=0.01) as c, pytest.raises(ServiceError):
        c.get_json("/flaky")
    assert calls["GET /flaky"] == 2


def test_unreachable_service_is_status_0():
    port = _free_port()
    with ServiceClient(f"http://127.0.0.1:{port}", retries=1, backoff_s=0.01) as c:
        with pytest.raises(ServiceError) as err:
            c.get_json("/health")
    assert err.value.status == 0 and err.value.error_code == "unreachable"


def test_client_reads_url_and_key_from_settings():
    s = load_settings(verifier={"url": "http://verifier.svc:8003", "api_key": "k"})
    c = VerifierClient.from_settings(s)
    assert c.base_url == "http://verifier.svc:8003"
    c.close()


def test_client_sends_the_api_key_from_settings():
    """Against a server that requires the key: the one from settings gets through (the route's
    own 404 comes back), none or another one is refused."""
    required = load_settings(auth_enabled=True, verifier={"api_key": "k"})
    with _serve(create_app("verifier", routers=[router], settings=required)) as url:
        for key, status in (("k", 404), ("wrong", 401), (None, 401)):
            settings = load_settings(verifier={"url": url, "api_key": key})
            with VerifierClient.from_settings(settings, retries=0) as c:
                with pytest.raises(ServiceError) as err:
                    c.get_json("/missing/widget")
            assert err.value.status == status, (key, err.value)


async def test_async_client_same_semantics(server_url):
    async with AsyncServiceClient(server_url, retries=3, backoff_s=0.01) as c:
        assert (await c.get_json("/flaky"))["attempts"] == 3
        with pytest.raises(ServiceError) as err:
            await c.get_json("/missing/x")
        assert err.value.status == 404 and "'x'" in err.value.message
        with pytest.raises(ServiceError):
            await c.post_json("/flaky", {})
    assert calls["POST /flaky"] == 1
