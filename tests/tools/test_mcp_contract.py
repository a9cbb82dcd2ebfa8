"""Contract: the official ``mcp`` client (``streamable_http_client`` + ``ClientSession``) against
the real tools service (``create_app``) served by uvicorn on a loopback port. Each world's
endpoint serves that world's tools under that world's token, and a bad call is an error the
session survives."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from tests.tools.apps_conftest import create_world, service_server


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with service_server(tmp_path_factory.mktemp("mcp_contract")) as (_, base):
        yield base


async def _session(url: str, token: str, script: Any) -> Any:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        return await script(session)


def run(url: str, token: str, script: Any) -> Any:
    return anyio.run(_session, url, token, script)


def test_initialize_list_call_and_errors(url):
    from mcp.shared.exceptions import MCPError

    wid, token = create_world(url, seed=3)

    async def script(s):
        init = await s.initialize()
        tools = (await s.list_tools()).tools
        posted = await s.call_tool(
            "slack_post_message", {"channel_id": "general", "text": "contract hello"}
        )
        history = await s.call_tool("slack_get_channel_history", {"channel_id": "general"})
        bad_args = await s.call_tool("slack_post_message", {"channel_id": "general"})
        app_error = await s.call_tool("slack_post_message", {"channel_id": "nowhere", "text": "x"})
        try:
            await s.call_tool("no_such_tool", {})
            unknown = None
        except MCPError as exc:
            unknown = exc
        after = await s.call_tool("slack_list_channels", {})  # the session survived
        return init, tools, posted, history, bad_args, app_error, unknown, after

    init, tools, posted, history, bad_args, app_error, unknown, after = run(
        f"{url}/worlds/{wid}/mcp", token, script
    )
    assert init.server_info.name == "k3stack-tools"
    assert init.capabilities.tools is not None
    by_name = {t.name: t for t in tools}
    assert {"slack_post_message", "API-post-search", "create-event", "send_email"} <= set(by_name)
    send = by_name["send_email"]
    assert {"to", "subject", "body"} <= set(send.input_schema["required"])
    assert by_name["search_emails"].annotations.read_only_hint is True
    assert by_name["send_email"].annotations.read_only_hint is False

    assert posted.is_error is False
    assert posted.structured_content["message"]["text"] == "contract hello"
    texts = [m["text"] for m in json.loads(history.content[0].text)["messages"]]
    assert texts == ["contract hello"]

    assert bad_args.is_error is True
    err = json.loads(bad_args.content[0].text)
    assert err["error"] == "invalid_arguments" and "text" in err["message"]
    assert app_error.is_error is True
    assert json.loads(app_error.content[0].text)["error"] == "channel_not_found"
    assert unknown is not None and "no_such_tool" in str(unknown)
    assert after.is_error is False


def test_per_world_routing_and_tokens(url):
    a, token_a = create_world(url, seed=4)
    b, token_b = create_world(url, seed=4)

    async def post(s):
        await s.initialize()
        return await s.call_tool("slack_post_message", {"channel_id": "general", "text": "in A"})

    async def slack_view(s):
        await s.initialize()
        names = [t.name for t in (await s.list_tools()).tools]
        hist = await s.call_tool("slack_get_channel_history", {"channel_id": "general"})
        return names, json.loads(hist.content[0].text)["messages"]

    assert run(f"{url}/worlds/{a}/mcp", token_a, post).is_error is False
    names, messages_b = run(f"{url}/worlds/{b}/mcp/slack", token_b, slack_view)
    assert names and all(n.startswith("slack_") for n in names)
    assert messages_b == []  # world B never saw world A's post
    _, messages_a = run(f"{url}/worlds/{a}/mcp/slack", token_a, slack_view)
    assert [m["text"] for m in messages_a] == ["in A"]

    # one world's token does not open another's MCP endpoint
    r = httpx.post(
        f"{url}/worlds/{a}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {token_b}", "Accept": "application/json"},
    )
    assert r.status_code == 403
    r = httpx.post(
        f"{url}/worlds/{a}/mcp/nope",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {token_a}", "Accept": "application/json"},
    )
    assert r.status_code == 404 and "unknown app" in r.json()["error"]["message"]
