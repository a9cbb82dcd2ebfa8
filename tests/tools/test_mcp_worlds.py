"""Slack, Notion and Calendar state through the world lifecycle of the real service: actions
taken over MCP show in the state export, forks are equal, restore undoes, and the same seed plus
the same actions gives the same state hash."""

from __future__ import annotations

import httpx
import pytest

from tests.tools.apps_conftest import ADMIN, create_world, service_server


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with service_server(tmp_path_factory.mktemp("worlds")) as (_, base):
        yield base


def act(url: str, wid: str, token: str) -> None:
    """A fixed little session over MCP touching the three apps."""
    calls = [
        ("slack_post_message", {"channel_id": "general", "text": "kickoff at 10"}),
        (
            "API-post-page",
            {
                "parent": {"workspace": True},
                "properties": {"title": [{"text": {"content": "Kickoff notes"}}]},
            },
        ),
        (
            "create-event",
            {"summary": "Kickoff", "start": "2026-03-03T10:00:00Z", "end": "2026-03-03T10:30:00Z"},
        ),
    ]
    for i, (name, args) in enumerate(calls):
        r = httpx.post(
            f"{url}/worlds/{wid}/mcp",
            json={
                "jsonrpc": "2.0",
                "id": i,
                "method": "tools/call",
                "params": {"name": name, "arguments": args},
            },
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200 and r.json()["result"]["isError"] is False, r.text


def state(url: str, wid: str) -> dict:
    r = httpx.get(f"{url}/worlds/{wid}/state", params={"tables": "false"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json()


def test_lifecycle_and_determinism(url):
    a, token_a = create_world(url, seed=7)
    snap = httpx.post(f"{url}/worlds/{a}/snapshots", json={}, headers=ADMIN).json()["id"]
    act(url, a, token_a)
    s = state(url, a)
    exported = s["apps"]
    assert [m["text"] for m in exported["slack"]["messages"]] == ["kickoff at 10"]
    assert len(exported["notion"]["pages"]) == 1
    assert [e["summary"] for e in exported["calendar"]["events"]] == ["Kickoff"]

    fork = httpx.post(f"{url}/worlds/{a}/fork", headers=ADMIN).json()
    assert state(url, fork["id"])["state_hash"] == s["state_hash"]

    b, token_b = create_world(url, seed=7)
    act(url, b, token_b)
    assert state(url, b)["state_hash"] == s["state_hash"]

    httpx.post(
        f"{url}/worlds/{a}/restore", json={"snapshot_id": snap}, headers=ADMIN
    ).raise_for_status()
    assert state(url, a)["state_hash"] != s["state_hash"]
    # the fork kept its own copy
    assert state(url, fork["id"])["state_hash"] == s["state_hash"]
