"""Cache-aware routing: two real model replicas on loopback behind the router; a session sticks
to its primary (and hits its cache there), and its pre-assigned backup takes over when the
primary goes down."""

from __future__ import annotations

import httpx

from services.model.serving.router import HashRing, create_router_app
from tests.model.conftest import ServerThread, model_settings


def test_ring_pins_each_key_to_a_primary_and_a_distinct_backup():
    ring = HashRing(["http://a", "http://b", "http://c"])
    routes = [ring.route(f"session-{i}") for i in range(300)]
    assert all(p != b for p, b in routes)
    assert routes == [ring.route(f"session-{i}") for i in range(300)]  # stable
    primaries = {p for p, _ in routes}
    backups_of_a = {b for p, b in routes if p == "http://a"}
    assert primaries == {"http://a", "http://b", "http://c"}
    assert backups_of_a == {"http://b", "http://c"}  # a's failover load spreads
    assert HashRing(["http://a"]).route("x") == ("http://a", None)


def test_sessions_stick_to_their_replica_and_fail_over_to_the_backup():
    from services.model.app import create_app

    settings = model_settings(page_tokens=64, hash_block_tokens=32, max_num_batched_tokens=64)
    a = ServerThread(create_app(settings)).start()
    b = ServerThread(create_app(settings)).start()
    router = ServerThread(create_router_app([a.url, b.url])).start()
    try:
        system = "You are a careful agent. " * 30
        body = {
            "model": "k3-tiny",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "hello"},
            ],
            "max_tokens": 2,
            "temperature": 0,
        }
        primary, backup = HashRing([a.url, b.url]).route("s1")
        with httpx.Client(base_url=router.url, timeout=60) as c:
            first = c.post("/v1/chat/completions", json=body, headers={"x-session-id": "s1"})
            again = c.post("/v1/chat/completions", json=body, headers={"x-session-id": "s1"})
            assert first.status_code == again.status_code == 200
            assert first.headers["x-k3stack-replica"] == again.headers["x-k3stack-replica"]
            assert first.headers["x-k3stack-replica"] == primary
            assert again.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
            (a if primary == a.url else b).stop()
            moved = c.post("/v1/chat/completions", json=body, headers={"x-session-id": "s1"})
            assert moved.status_code == 200 and moved.headers["x-k3stack-replica"] == backup
            assert moved.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            bad = c.post("/v1/chat/completions", content=b"{nope", headers={"x-session-id": "s1"})
            assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]
    finally:
        for server in (router, a, b):  # stopping a stopped server is a no-op
            server.stop()
