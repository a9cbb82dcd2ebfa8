"""The typed clients against a real HTTP server: errors carry the service's message, retries
happen only for idempotent calls."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import APIRouter

from shared.app import create_app
from shared.chat import ChatMessage
from shared.clients import (
    WAIT_MARGIN_S,
    AsyncModelClient,
    AsyncSandboxClient,
    AsyncServiceClient,
    Call,
    ModelClient,
    SandboxClient,
    ServiceClient,
    ServiceError,
    VerifierClient,
)
from shared.contracts.model import ChatCompletion
from shared.contracts.sandbox import ExecOutput
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


# --- typed results, per-call timeouts and transport= (httpx.MockTransport) ------------------

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "k3-tiny",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 9,
        "completion_tokens": 3,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 4},
    },
    "k3stack_future_field": [1, 2],
}
EXEC = {"exit_code": 0, "stdout": "hi\n", "stderr": "", "timed_out": False, "duration_ms": 5.0}


class Recorder:
    """A MockTransport handler that answers by path and remembers every request."""

    def __init__(self, answers: dict[str, tuple[int, object]]) -> None:
        self.answers = answers
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        status, body = self.answers[request.url.path]
        return httpx.Response(status, json=body)


def test_chat_is_one_typed_call_with_the_generation_timeout():
    rec = Recorder({"/v1/chat/completions": (200, ANSWER)})
    client = ModelClient(
        "http://model", model="k3-tiny", generation_timeout_s=321.0, timeout=1.0,
        transport=httpx.MockTransport(rec),
    )  # fmt: skip
    answer = client.chat([ChatMessage(role="user", content="hi")], max_tokens=3)
    assert isinstance(answer, ChatCompletion)
    assert answer.choices[0].message.tool_calls[0].function.name == "f"
    assert answer.usage.cached_tokens == 4
    assert answer.model_extra["k3stack_future_field"] == [1, 2]  # extensions survive
    [request] = rec.seen  # no /v1/models listing first
    body = json.loads(request.content)
    assert body["model"] == "k3-tiny" and body["stream"] is False and body["max_tokens"] == 3
    assert request.extensions["timeout"]["read"] == 321.0
    msg = answer.choices[0].message.as_message()
    assert msg.role == "assistant" and msg.tool_calls[0].id == "c1"


def test_model_client_from_settings_takes_model_and_timeout():
    s = load_settings(llm_timeout_s=77.0, model={"served_model_name": "k3-small"})
    c = ModelClient.from_settings(s)
    assert (c.defaults.model, c.defaults.generation_timeout_s) == ("k3-small", 77.0)
    c.close()


def test_exec_waits_for_its_command_not_the_global_timeout():
    rec = Recorder({"/sandboxes/s1/exec": (200, EXEC)})
    client = SandboxClient("http://sb", timeout=1.0, transport=httpx.MockTransport(rec))
    out = client.exec("s1", "sleep 55", timeout=55)
    assert isinstance(out, ExecOutput) and out.stdout == "hi\n"
    assert rec.seen[0].extensions["timeout"]["read"] == 55 + WAIT_MARGIN_S
    assert json.loads(rec.seen[0].content)["timeout_s"] == 55
    client.exec("s1", ["true"], timeout=0)  # no command limit: no HTTP limit either
    assert rec.seen[1].extensions["timeout"]["read"] is None


def test_bad_answers_are_validation_errors_not_silent_dicts():
    rec = Recorder({"/sandboxes/s1/exec": (200, {"stdout": "no exit code"})})
    client = SandboxClient("http://sb", transport=httpx.MockTransport(rec))
    with pytest.raises(ValueError, match="exit_code"):
        client.exec("s1", "true")


def test_one_retry_policy_for_both_flavours():
    sync, async_ = SandboxClient("http://x", retries=4), AsyncSandboxClient("http://x", retries=4)
    for method, attempts in (("GET", 5), ("DELETE", 5), ("POST", 1), ("PATCH", 1)):
        a, b = sync.retry_policy(method), async_.retry_policy(method)
        assert a["stop"].max_attempt_number == b["stop"].max_attempt_number == attempts


async def test_async_twins_return_the_same_models():
    rec = Recorder({"/v1/chat/completions": (200, ANSWER), "/sandboxes/s1/exec": (200, EXEC)})
    transport = httpx.MockTransport(rec)
    async with AsyncModelClient("http://m", transport=transport) as model:
        answer = await model.chat([{"role": "user", "content": "hi"}])
    async with AsyncSandboxClient("http://s", transport=transport) as sandbox:
        out = await sandbox.exec("s1", "echo hi", timeout=5)
    assert isinstance(answer, ChatCompletion) and isinstance(out, ExecOutput)
    assert "model" not in json.loads(rec.seen[0].content)  # none configured: the service's own
    assert rec.seen[1].extensions["timeout"]["read"] == 5 + WAIT_MARGIN_S


async def test_async_retries_on_503_then_succeeds():
    answers = iter([httpx.Response(503, json={"message": "busy"}), httpx.Response(200, json=EXEC)])
    transport = httpx.MockTransport(lambda request: next(answers))
    async with AsyncSandboxClient("http://s", transport=transport, backoff_s=0.001) as sandbox:
        detail = await sandbox.send(Call("GET", "/x", ExecOutput))
    assert detail.exit_code == 0


def test_verifier_client_answers_job_views_and_waits():
    from shared.clients import VerifierClient
    from shared.jobs import JobView

    job = {"id": "j1", "kind": "echo", "status": "queued", "created_at": "2026-01-01T00:00:00Z"}
    polls = iter(["running", "succeeded"])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            assert json.loads(request.content) == {"kind": "echo", "payload": {"a": 1}}
            return httpx.Response(202, json=job)
        return httpx.Response(200, json={**job, "status": next(polls), "result": {"ok": True}})

    with VerifierClient("http://v", transport=httpx.MockTransport(handler)) as client:
        created = client.create_job("echo", {"a": 1})
        assert isinstance(created, JobView) and created.status == "queued"
        done = client.wait_job(created.id, timeout_s=30, initial_s=0.001)
        assert (
            isinstance(done, JobView) and done.status == "succeeded" and done.result == {"ok": True}
        )


def test_the_default_timeout_follows_the_load_and_an_explicit_one_stays(monkeypatch) -> None:
    """http_timeout_s is an idle host's wait: at load 6 on 2 cores a call gets 3x it (to 8x at
    most), so a loaded host's slow answer is not taken for a dead service; a call's own timeout
    (a wait on work) is left as the caller set it."""
    import os

    from shared.clients import ServiceClient

    seen: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"]["read"])
        return httpx.Response(200, json={})

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    client = ServiceClient("http://svc", timeout=30.0, transport=httpx.MockTransport(handler))
    for load, want in ((0.5, 30.0), (6.0, 90.0), (100.0, 240.0)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        client.request("GET", "/x")
        assert seen[-1] == pytest.approx(want)
    client.request("GET", "/x", timeout=5.0)
    assert seen[-1] == 5.0
