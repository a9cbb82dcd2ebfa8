"""The world's app tools, taken from the tools service's MCP servers (``tools/list``).

Each app is its own MCP server (``/worlds/{id}/mcp/{app}``), as the public Gmail, Slack, Notion
and Calendar servers are, so a harness sees them under its own naming rule for MCP tools
(Claude Code ``mcp__gmail__send_email``, Hermes ``mcp_gmail_send_email``...). Calls go over
HTTP with the world token through the official ``mcp`` client; an ``isError`` result is an
error observation.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from services.orchestrator.tools.base import Tool, ToolFailure

APPS = ("gmail", "slack", "calendar", "notion")
T = TypeVar("T")


class WorldMCP:
    """The official ``mcp`` client (``streamable_http_client`` + ``Client``: the
    ``initialize`` handshake, JSON or SSE replies) against a world's per-app MCP endpoint.

    The loop is synchronous and runs each tool call on its own thread, so every operation opens
    a session on a fresh event loop there (``anyio.run``): nothing is shared between threads.
    """

    def __init__(self, tools_client: Any, world_id: str, token: str, timeout_s: float = 60.0):
        self.base_url = tools_client.base_url
        self.world_id = world_id
        self.token = token
        self.timeout_s = timeout_s

    def url(self, app: str) -> str:
        return f"{self.base_url}/worlds/{self.world_id}/mcp/{app}"

    def _session(self, app: str, work: Callable[[Any], Awaitable[T]]) -> T:
        import anyio
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared.exceptions import MCPError

        async def main() -> T:
            http = httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {self.token}"}, timeout=self.timeout_s
            )
            async with http, Client(streamable_http_client(self.url(app), http_client=http)) as c:
                return await work(c)

        try:
            return anyio.run(main)
        except MCPError as exc:
            raise ToolFailure(f"MCP error from {app}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - transport failures (in a task group) too
            raise ToolFailure(f"tools service error ({app} MCP): {_first_cause(exc)}") from None

    def list_tools(self, app: str) -> list[Any]:
        """The app's tools (``mcp_types.Tool``)."""

        async def work(c: Any) -> list[Any]:
            return list((await c.list_tools()).tools)

        return self._session(app, work)

    def call(self, app: str, name: str, arguments: dict[str, Any]) -> str:
        async def work(c: Any) -> Any:
            return await c.call_tool(name, arguments)

        result = self._session(app, work)
        text = "\n".join(getattr(c, "text", "") for c in result.content if c.type == "text")
        if result.is_error:
            raise ToolFailure(text or "tool failed")
        return text


def _first_cause(exc: BaseException) -> str:
    """The innermost error of an exception group (anyio wraps a failed transport in one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def scenario_apps(scenario: dict[str, Any]) -> list[str]:
    """Apps a scenario instance touches (its setup, effects and checks)."""
    ops = [e["op"] for e in scenario.get("setup", [])]
    ops += [f["op"] for ev in scenario.get("events", []) for f in ev.get("effects", [])]
    ops += [c["kind"] for ev in scenario.get("events", []) for c in ev.get("checks", [])]
    found = {o.split(".")[0] for o in ops}
    return [a for a in APPS if a in found]


def world_tools(
    mcp: WorldMCP, apps: list[str], name_rule: str, underscores: bool = False
) -> list[Tool]:
    """One :class:`Tool` per MCP tool of each app, named by the harness's rule (``underscores``:
    hyphens in the name become underscores, as Codex names MCP tools)."""
    out = []
    for app in apps:
        for spec in mcp.list_tools(app):
            read_only = bool(spec.annotations and spec.annotations.read_only_hint)

            def run(ctx: Any, args: dict[str, Any], app: str = app, tool: str = spec.name) -> str:
                return mcp.call(app, tool, args)

            out.append(
                Tool(
                    name=_named(name_rule, app, spec.name, underscores),
                    description=spec.description or "",
                    parameters=spec.input_schema or {"type": "object", "properties": {}},
                    run=run,
                    effect="none" if read_only else "world",
                    source=f"{app}/{spec.name}",
                )
            )
    return out


def _named(rule: str, server: str, tool: str, underscores: bool) -> str:
    name = rule.format(server=server, tool=tool)
    return name.replace("-", "_") if underscores else name


def mcp_name_map(tools: list[Tool]) -> dict[str, str]:
    """``"gmail/send_email"`` -> the harness's public name, for the oracle."""
    return {t.source: t.name for t in tools if t.source}


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)
