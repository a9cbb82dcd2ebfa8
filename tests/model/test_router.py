"""The router as an agent stack meets it: session keys that spread an agent's sessions (one
system prompt, many conversations), the service's body limit, and a client that leaves aborting
its generation on the replica, streaming or not."""

from __future__ import annotations

import time

import httpx
import pytest

from services.model.serving.router import create_router_app, session_key
from tests.model.conftest import ServerThread, model_settings

SYSTEM = {"role": "system", "content": "You are the shared agent prompt."}


def test_session_key_is_the_conversation_beyond_the_system_prompt():
    one = {"messages": [SYSTEM, {"role": "user", "content": "task one"}]}
    two = {"messages": [SYSTEM, {"role": "user", "content": "task two"}]}
    later = {"messages": [*one["messages"], {"role": "assistant", "content": "ok"}]}
    assert session_key({}, one) != session_key({}, two)
    assert session_key({}, one) == session_key({}, later)  # a session keeps its key as it grows
    responses = {"instructions": "x", "input": [{"role": "developer", "content": "d"}, "hi"]}
    assert session_key({}, responses) == '"hi"'
    assert session_key({"x-session-id": "s9"}, one) == "s9"


def test_a_ten_mib_body_is_refused_413_before_routing(serve_app):
    router = serve_app(create_router_app(["http://127.0.0.1:9"]))
    body = b'{"messages": "' + b"x" * (10 * 1024 * 1024) + b'"}'
    r = httpx.post(router.url + "/v1/chat/completions", content=body, timeout=60)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def _aborted(url: str) -> int:
    health = httpx.get(url + "/health", timeout=30).json()
    return int(health["checks"]["engine"]["aborted"])


def _wait_aborted(url: str, above: int) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (n := _aborted(url)) > above:
            return n
        time.sleep(0.2)
    raise AssertionError("the replica never aborted the request")


@pytest.fixture(scope="module")
def replica_and_router():
    from services.model.app import create_app

    replica = ServerThread(create_app(model_settings())).start()
    router = ServerThread(create_router_app([replica.url])).start()
    yield replica, router
    router.stop()
    replica.stop()


def _long(tokenizer) -> dict:
    """A generation of 1,800 tokens: the end-of-message token is biased away."""
    return {
        "model": "k3-tiny",
        "messages": [{"role": "user", "content": "go on"}],
        "max_tokens": 1800,
        "reasoning_effort": "none",
        "logit_bias": {str(tokenizer.special_id("[end_of_msg]")): -100},
    }


def test_a_client_that_leaves_a_non_streaming_request_aborts_it(replica_and_router, tokenizer):
    replica, router = replica_and_router
    before = _aborted(replica.url)
    with pytest.raises(httpx.ReadTimeout):
        body = _long(tokenizer)
        httpx.post(router.url + "/v1/chat/completions", json=body, timeout=2.0)
    assert _wait_aborted(replica.url, before) > before


def test_a_client_that_leaves_a_stream_aborts_it(replica_and_router, tokenizer):
    replica, router = replica_and_router
    before = _aborted(replica.url)
    body = _long(tokenizer)
    with httpx.stream("POST", router.url + "/v1/chat/completions", json={**body, "stream": True},
                      timeout=60) as r:  # fmt: skip
        assert r.status_code == 200
        next(r.iter_lines())  # the first event came: now leave
    assert _wait_aborted(replica.url, before) > before
