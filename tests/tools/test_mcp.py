"""MCP over streamable HTTP: JSON-RPC semantics, tools/list and tools/call round trips, and the
official ``mcp`` client against a real server."""

from __future__ import annotations

import json

import pytest

from services.tools.apps.calendar import actions as cal
from services.tools.apps.slack import actions as slack
from tests.tools.apps_conftest import live_server, make_world, tools_app, world_ctx


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with tools_app(tmp_path_factory.mktemp("mcp")) as app:
        yield app


@pytest.fixture
def world(app):
    w = make_world(app)
    with world_ctx(app, w.id) as ctx:
        slack.setup_workspace(ctx)
        w.bob = slack.create_user(ctx, name="bob", email="bob@acme.test")["id"]
        cal.setup_calendar(ctx, agent_email="assistant@k3stack.test")
    return w


def rpc(w, method, params=None, msg_id=1, path="mcp"):
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        body["params"] = params
    r = w.client.post(
        f"/worlds/{w.id}/{path}",
        json=body,
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 200, r.text
    return r.json()


def call(w, name, **arguments):
    res = rpc(w, "tools/call", {"name": name, "arguments": arguments})["result"]
    return res, json.loads(res["content"][0]["text"])


def test_initialize_list_and_notifications(world):
    init = rpc(
        world,
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    )
    assert init["result"]["protocolVersion"] == "2025-06-18"
    assert init["result"]["capabilities"]["tools"] == {"listChanged": False}
    hello = {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    odd = rpc(world, "initialize", {"protocolVersion": "1999-01-01", **hello})
    assert odd["result"]["protocolVersion"] == "2025-11-25"  # the newest it speaks
    assert init["result"]["serverInfo"]["name"] == "k3stack-tools"
    # initialize without the spec's required clientInfo is a JSON-RPC error, not a crash
    assert rpc(world, "initialize", {"protocolVersion": "2025-06-18"})["error"]["code"] == -32602
    r = world.client.post(
        f"/worlds/{world.id}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    assert r.status_code == 202 and r.content == b""
    names = [t["name"] for t in rpc(world, "tools/list")["result"]["tools"]]
    for expected in [
        "slack_post_message",
        "slack_list_channels",
        "API-post-search",
        "API-post-page",
        "create-event",
        "list-events",
        "search_emails",
        "send_email",
    ]:
        assert expected in names
    assert len(names) == len(set(names))
    slack_only = [t["name"] for t in rpc(world, "tools/list", path="mcp/slack")["result"]["tools"]]
    assert slack_only and all(n.startswith("slack_") for n in slack_only)
    tool = next(
        t for t in rpc(world, "tools/list")["result"]["tools"] if t["name"] == "slack_post_message"
    )
    assert tool["inputSchema"]["type"] == "object" and set(tool["inputSchema"]["required"]) == {
        "channel_id",
        "text",
    }
    assert rpc(world, "ping")["result"] == {}
    assert rpc(world, "server/discover")["error"]["code"] == -32601


def test_slack_round_trip_and_errors(world):
    res, posted = call(world, "slack_post_message", channel_id="general", text="hello from mcp")
    assert res["isError"] is False and res["structuredContent"]["ts"] == posted["ts"]
    _, reply = call(
        world,
        "slack_reply_to_thread",
        channel_id="general",
        thread_ts=posted["ts"],
        text="threaded",
    )
    _, history = call(world, "slack_get_channel_history", channel_id="general")
    assert [m["text"] for m in history["messages"]] == ["hello from mcp"]
    _, thread = call(
        world, "slack_get_thread_replies", channel_id="general", thread_ts=posted["ts"]
    )
    assert [m["text"] for m in thread["messages"]] == ["hello from mcp", "threaded"]
    # an app error is an observation in Slack's own shape, and writes nothing
    res, err = call(world, "slack_post_message", channel_id="nowhere", text="x")
    assert res["isError"] is True and err == {
        "ok": False,
        "error": "channel_not_found",
        "response_metadata": err["response_metadata"],
    }
    res, _ = call(world, "slack_post_message", channel_id="general")
    assert res["isError"] is True and "text" in res["content"][0]["text"]
    unknown = rpc(world, "tools/call", {"name": "no_such_tool", "arguments": {}})
    assert unknown["error"]["code"] == -32602


def test_notion_and_calendar_tools(world):
    _, page = call(
        world,
        "API-post-page",
        parent={"workspace": True},
        properties={"title": [{"text": {"content": "Plan"}}]},
    )
    _, found = call(world, "API-post-search", query="plan")
    assert [r["id"] for r in found["results"]] == [page["id"]]
    _, db = call(
        world,
        "API-create-a-database",
        parent={"page_id": page["id"]},
        properties={"Name": {"title": {}}, "Done": {"checkbox": {}}},
    )
    call(
        world,
        "API-post-page",
        parent={"database_id": db["id"]},
        properties={"Name": {"title": [{"text": {"content": "Row"}}]}, "Done": {"checkbox": True}},
    )
    _, rows = call(
        world,
        "API-post-database-query",
        database_id=db["id"],
        filter={"property": "Done", "checkbox": {"equals": True}},
    )
    assert len(rows["results"]) == 1
    res, err = call(world, "API-retrieve-a-page", page_id="nope")
    assert res["isError"] and err["code"] == "object_not_found"
    _, ev = call(
        world,
        "create-event",
        summary="Sync",
        start="2026-03-03T10:00:00",
        end="2026-03-03T10:30:00",
        timeZone="Europe/Paris",
        attendees=["bob@acme.test"],
    )
    assert ev["start"] == {"dateTime": "2026-03-03T10:00:00+01:00", "timeZone": "Europe/Paris"}
    _, listed = call(world, "list-events", timeMin="2026-03-03", timeMax="2026-03-04")
    assert [e["summary"] for e in listed["items"]] == ["Sync"]
    _, moved = call(
        world,
        "update-event",
        eventId=ev["id"],
        start="2026-03-03T11:00:00Z",
        end="2026-03-03T11:30:00Z",
    )
    assert moved["start"]["dateTime"].startswith("2026-03-03T11:00:00")
    _, fb = call(
        world,
        "get-freebusy",
        calendars=["primary"],
        timeMin="2026-03-03T00:00:00Z",
        timeMax="2026-03-04T00:00:00Z",
    )
    assert fb["calendars"]["primary"]["busy"] == [
        {"start": "2026-03-03T11:00:00.000Z", "end": "2026-03-03T11:30:00.000Z"}
    ]
    res, err = call(
        world,
        "create-event",
        summary="Bad",
        start="2026-03-03T12:00:00Z",
        end="2026-03-03T11:00:00Z",
    )
    assert res["isError"] and err["error"]["code"] == 400


def test_gmail_tools(world):
    res, sent = call(
        world, "send_email", to=["bob@acme.test"], subject="Offer letter", body="Attached soon."
    )
    assert res["isError"] is False and "SENT" in sent["labelIds"]
    _, found = call(world, "search_emails", query="subject:offer in:sent")
    assert [m["id"] for m in found["messages"]] == [sent["id"]]
    _, read = call(world, "read_email", messageId=sent["id"])
    assert "Attached soon." in read["body"]
    res, _ = call(world, "read_email", messageId="missing")
    assert res["isError"]


def test_transport_edges(app, world):
    url = f"/worlds/{world.id}/mcp"
    r = world.client.post(url, content=b"{nope", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32700
    assert world.client.get(url).status_code == 405
    r = world.client.post(url, content=b"{}", headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32600
    # JSON-RPC batches left MCP in 2025-06-18; the SDK answers them with an error, not a crash
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]
    r = world.client.post(url, json=batch)
    assert r.status_code == 400 and r.json()["error"]["code"] in (-32600, -32602)
    # a client that takes neither JSON nor a stream is told so
    r = world.client.post(
        url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Accept": "text/html"}
    )
    assert r.status_code == 406
    other = make_world(app)
    r = other.client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert r.status_code in (401, 403)


def test_official_mcp_client(app, world):
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session(url):
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {world.token}"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            tools = await client.list_tools()
            names = {t.name for t in tools.tools}
            posted = await client.call_tool(
                "slack_post_message", {"channel_id": "general", "text": "via sdk"}
            )
            failed = await client.call_tool("slack_get_user_profile", {"user_id": "U0NOPE"})
            return names, posted, failed

    with live_server(app) as base:
        names, posted, failed = anyio.run(session, f"{base}/worlds/{world.id}/mcp")
    assert {"slack_post_message", "API-post-search", "create-event"} <= names
    assert posted.is_error is False and posted.structured_content["message"]["text"] == "via sdk"
    assert failed.is_error is True and "user_not_found" in failed.content[0].text


def test_a_forwarded_tool_is_checked_against_its_action():
    """A pass-through tool is only its arguments model: the handler is derived from it, and a
    field the action does not take fails at registration, not in an agent's call."""
    from pydantic import BaseModel

    from services.tools.mcp.registry import _REGISTRY, forward

    class Greet(BaseModel):
        """Say hello."""

        who: str

    def greet(ctx, *, name: str) -> dict:
        return {"hello": name}

    with pytest.raises(TypeError, match="takes no who"):
        forward("test_app", "greet", Greet, greet)
    forward("test_app", "greet", Greet, greet, rename={"who": "name"}, read_only=True)
    try:
        t = _REGISTRY["test_app"]["greet"]
        assert t.description == "Say hello." and t.read_only
        assert t.schema()["inputSchema"]["required"] == ["who"]
        assert "description" not in t.schema()["inputSchema"]
        assert t.handler(None, Greet(who="ana")) == {"hello": "ana"}
    finally:
        _REGISTRY.pop("test_app", None)
