"""The recording gateway on its own: ``/v1/models`` and ``/v1/chat/completions`` forwarded to the
model service (tiny model) and recorded with their token ids, logprobs and latency; the output
cap applied; bad input a 4xx; and a client that goes away closes its upstream request, so the
policy's server stops generating for nobody (waiting for the answer's head, and mid-stream)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest

from services.orchestrator.gateway import Route, Routes, gateway_app
from tests.model.conftest import model_settings, running

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gateway():
    from services.model.app import create_app

    routes = Routes()
    with running(create_app(model_settings())) as model, running(gateway_app(routes)) as gw:
        yield model.url, gw.url, routes


def _route(routes: Routes, base_url: str, cap: int | None = 4) -> tuple[str, list[dict]]:
    steps: list[dict[str, Any]] = []
    episode = f"ep{len(routes._routes)}-{time.monotonic_ns()}"
    routes.add(episode, Route(base_url, None, steps.append, cap, agent="test-agent@0"))
    return episode, steps


def test_models_are_the_policy_endpoints(gateway):
    model_url, gw, routes = gateway
    episode, _ = _route(routes, model_url + "/v1")
    r = httpx.get(f"{gw}/episodes/{episode}/v1/models", timeout=30)
    assert r.status_code == 200, r.text
    assert "k3-tiny" in [m["id"] for m in r.json()["data"]]
    assert httpx.get(f"{gw}/episodes/nobody/v1/models", timeout=30).status_code == 404


def test_chat_completions_forwarded_capped_and_recorded(gateway):
    model_url, gw, routes = gateway
    episode, steps = _route(routes, model_url + "/v1")
    body = {
        "model": "k3-tiny",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 500,
        "logprobs": True,
        "return_token_ids": True,
    }
    r = httpx.post(f"{gw}/episodes/{episode}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["usage"]["completion_tokens"] <= 4  # the route's cap, not the client's 500
    (step,) = steps
    assert step["api"] == "chat/completions" and step["request"]["max_tokens"] == 4
    assert step["status"] == 200 and step["latency_s"] > 0 and step["agent"] == "test-agent@0"
    choice = step["response"]["choices"][0]
    assert choice["token_ids"] and len(choice["logprobs"]["content"]) == len(choice["token_ids"])

    stream = {**body, "stream": True}
    with httpx.stream(
        "POST", f"{gw}/episodes/{episode}/v1/chat/completions", json=stream, timeout=120
    ) as r:
        assert r.status_code == 200 and "text/event-stream" in r.headers["content-type"]
        raw = "".join(r.iter_text())
    assert "[DONE]" in raw
    assert len(steps) == 2 and steps[1]["events"][-1] == "[DONE]"
    assert any(isinstance(e, dict) and e.get("choices") for e in steps[1]["events"])


def test_bad_input_is_a_4xx(gateway):
    model_url, gw, routes = gateway
    episode, steps = _route(routes, model_url + "/v1")
    url = f"{gw}/episodes/{episode}/v1/chat/completions"
    assert httpx.post(url, content=b"{not json", timeout=30).status_code == 400
    r = httpx.post(url, json={"model": "k3-tiny", "messages": "nope"}, timeout=30)
    assert 400 <= r.status_code < 500, r.text
    assert steps[-1]["status"] == r.status_code  # a refused exchange is recorded too
    r = httpx.post(f"{gw}/episodes/nobody/v1/chat/completions", json={}, timeout=30)
    assert r.status_code == 404 and "nobody" in r.text


class _Hanging:
    """A stand-in policy endpoint that never finishes its answer (to see the gateway hang up):
    ``stream`` sends one event and then waits; otherwise nothing is sent. It notes when its
    client (the gateway) disconnected."""

    def __init__(self) -> None:
        self.gone = threading.Event()

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while (message := await receive())["type"] == "http.request":
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if json.loads(body or b"{}").get("stream"):
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            event = b'data: {"type": "message_start"}\n\n'
            await send({"type": "http.response.body", "body": event, "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            await asyncio.sleep(0)
        self.gone.set()


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_closes_the_upstream_request(gateway, stream):
    _, gw, routes = gateway
    upstream = _Hanging()
    with running(upstream) as policy:
        episode, steps = _route(routes, policy.url + "/v1")
        url = f"{gw}/episodes/{episode}/v1/messages"
        body = {"model": "m", "max_tokens": 10, "stream": stream, "messages": []}
        with httpx.Client(timeout=httpx.Timeout(120, read=1.0)) as client:
            if stream:
                with client.stream("POST", url, json=body) as r:
                    first = next(r.iter_lines())  # the one event; then the client leaves
                    assert first.startswith("data:")
            else:
                with pytest.raises(httpx.ReadTimeout):
                    client.post(url, json=body)
        assert upstream.gone.wait(60), "the gateway kept the upstream request open"
        deadline = time.monotonic() + 60
        while not steps and time.monotonic() < deadline:
            time.sleep(0.05)
        assert steps and steps[0]["client_gone"] is True
        assert steps[0]["request"]["max_tokens"] == 4


def test_exchanges_become_atif_agent_steps(gateway):
    """Every API, streamed or not, through the gateway to the tiny model; the recorded
    exchanges convert to valid ATIF agent steps with their latency, usage and (chat) tokens."""
    from services.orchestrator.episode.export import to_shared
    from shared.trajectory.atif import to_atif, validate_atif

    model_url, gw, routes = gateway
    episode, steps = _route(routes, model_url + "/v1")
    user = [{"role": "user", "content": "hello"}]
    bodies = {
        "chat/completions": {"messages": user, "logprobs": True, "return_token_ids": True},
        "messages": {"messages": user, "max_tokens": 50},
        "responses": {"input": "hello", "store": False},
    }
    for api, body in bodies.items():
        for stream in (False, True):
            url = f"{gw}/episodes/{episode}/v1/{api}"
            sent = {"model": "k3-tiny", **body, "stream": stream}
            with httpx.stream("POST", url, json=sent, timeout=120) as r:
                assert r.status_code == 200, r.read()
                r.read()
    assert len(steps) == 6
    items = [{"kind": "agent", "name": "test-agent", "version": "0.1", "at": "2026-01-01T00:00Z"}]
    items += [{"kind": "exchange", "at": "2026-01-01T00:00:01Z", **s} for s in steps]
    doc = {"episode_id": episode, "items": items, "task": {"scenario": "s", "seed": 0}}
    atif = to_atif(to_shared(doc))
    validate_atif(atif)
    assert (atif["agent"]["name"], atif["agent"]["version"]) == ("test-agent", "0.1")
    agent_steps = [s for s in atif["steps"] if s["source"] == "agent"]
    assert len(agent_steps) == 6 and all(s["model_name"] == "k3-tiny" for s in agent_steps)
    for s, step in zip(agent_steps, steps, strict=True):
        gen = s["extra"]["k3stack"]["step"]
        assert gen["generation"]["latency_ms"] == pytest.approx(step["latency_s"] * 1000)
        assert gen["options"]["gateway"]["api"] == step["api"]
        assert s.get("message") or s.get("reasoning_content")  # what the model said
        if (
            s["extra"]["k3stack"]["step"]["options"]["stream"] is False
            or step["api"] != "chat/completions"
        ):
            assert 0 < s["metrics"]["completion_tokens"] <= 4
    for s in agent_steps[:2]:  # chat completions carry token ids and logprobs, aligned
        ids = s["metrics"]["completion_token_ids"]
        assert ids and len(s["metrics"]["logprobs"]) == len(ids)
