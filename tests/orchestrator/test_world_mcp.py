"""World tools go through the official ``mcp`` client against the tools service's per-app MCP
endpoints: it lists and calls tools after the ``initialize`` handshake; a tool's error result,
a bad token and a dead endpoint are ToolFailures (error observations), never a crash; one
session per app serves the whole run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.orchestrator.tools.base import ToolFailure
from services.orchestrator.tools.mcp import WorldMCP, world_tools


def test_the_official_client_lists_and_calls_world_tools(services: Any) -> None:
    world = services.tools.create_world("finance_expenses", 1)
    try:
        mcp = WorldMCP(services.tools, world.id, world.token, timeout_s=30)
        names = {t.name for t in mcp.list_tools("slack")}
        assert {"slack_post_message", "slack_list_channels"} <= names
        posted = mcp.call("slack", "slack_post_message", {"channel_id": "general", "text": "hi"})
        assert "hi" in posted
        with pytest.raises(ToolFailure, match="channel"):
            mcp.call("slack", "slack_post_message", {"channel_id": "nowhere", "text": "x"})
        tools = world_tools(mcp, ["slack"], "mcp__{server}__{tool}")
        by_name = {t.name: t for t in tools}
        listed = by_name["mcp__slack__slack_list_channels"]
        assert (
            listed.effect == "none" and by_name["mcp__slack__slack_post_message"].effect == "world"
        )
        assert "general" in listed.run(None, {})
        # Codex's naming (the codex preset): hyphens become underscores, the call still reaches
        # the hyphenated MCP tool
        codex = {t.name: t for t in world_tools(mcp, ["calendar"], "mcp__{server}__{tool}", True)}
        assert "mcp__calendar__create_event" in codex and not any("-" in n for n in codex)
        assert codex["mcp__calendar__create_event"].source == "calendar/create-event"
        bad = WorldMCP(services.tools, world.id, "wrong-token", timeout_s=30)
        with pytest.raises(ToolFailure, match="slack MCP|MCP error"):
            bad.list_tools("slack")
        bad.close()
    finally:
        mcp.close()
        services.tools.delete_world(world.id)


def test_one_session_serves_the_run_and_a_lost_one_is_reopened(services: Any) -> None:
    """Calls share the app's session (no handshake per call); a session that ended is replaced
    at the next call; close ends the sessions' thread."""
    world = services.tools.create_world("finance_expenses", 1)
    mcp = WorldMCP(services.tools, world.id, world.token, timeout_s=30)
    try:
        assert "general" in mcp.call("slack", "slack_list_channels", {})
        first = mcp._sessions["slack"]
        mcp.call("slack", "slack_post_message", {"channel_id": "general", "text": "one"})
        assert mcp._sessions["slack"] is first and not first.task.done()
        mcp._loop.call_soon_threadsafe(first.task.cancel)  # the session ends under it
        asyncio.run_coroutine_threadsafe(asyncio.wait([first.task]), mcp._loop).result(30)
        posted = mcp.call("slack", "slack_post_message", {"channel_id": "general", "text": "two"})
        assert "two" in posted and first.task.done()
        assert mcp._sessions["slack"] is not first
        thread = mcp._thread
        mcp.close()
        assert not thread.is_alive() and mcp._sessions == {}
    finally:
        mcp.close()
        services.tools.delete_world(world.id)


def test_a_dead_endpoint_is_a_tool_failure() -> None:
    class Nowhere:
        base_url = "http://127.0.0.1:9"

    mcp = WorldMCP(Nowhere(), "w", "t", timeout_s=5)
    with pytest.raises(ToolFailure, match="tools service error"):
        mcp.call("slack", "slack_list_channels", {})
    with pytest.raises(ToolFailure, match="tools service error"):  # tried again, not stuck
        mcp.call("slack", "slack_list_channels", {})
    mcp.close()
