"""The world's app tools, taken from the tools service's MCP servers (``tools/list``).

Each app is its own MCP server (``/worlds/{id}/mcp/{app}``), as the public Gmail, Slack, Notion
and Calendar servers are, so a harness sees them under its own naming rule for MCP tools
(Claude Code ``mcp__gmail__send_email``, Hermes ``mcp_gmail_send_email``...). Calls go over
HTTP with the world token; an ``isError`` result is an error observation.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from services.orchestrator.tools.base import Tool, ToolFailure

APPS = ("gmail", "slack", "calendar", "notion")
_ids = itertools.count(1)


class WorldMCP:
    """JSON-RPC over the tools service's streamable-HTTP MCP endpoint (JSON responses)."""

    def __init__(self, tools_client: Any, world_id: str, token: str) -> None:
        self.tools = tools_client
        self.world_id = world_id
        self.token = token

    def rpc(self, app: str, method: str, params: dict[str, Any] | None = None) -> Any:
        from shared.clients import ServiceError

        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params or {}}
        try:
            out = self.tools.app(
                self.world_id,
                self.token,
                "POST",
                f"mcp/{app}",
                json=body,
                headers={"Accept": "application/json, text/event-stream"},
            )
        except ServiceError as exc:
            raise ToolFailure(f"tools service error: {exc}") from None
        if not isinstance(out, dict):
            raise ToolFailure(f"unexpected MCP answer: {str(out)[:200]}")
        if "error" in out:
            raise ToolFailure(out["error"].get("message", "MCP error"))
        return out.get("result")

    def list_tools(self, app: str) -> list[dict[str, Any]]:
        return self.rpc(app, "tools/list")["tools"]

    def call(self, app: str, name: str, arguments: dict[str, Any]) -> str:
        result = self.rpc(app, "tools/call", {"name": name, "arguments": arguments})
        text = "\n".join(
            c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"
        )
        if result.get("isError"):
            raise ToolFailure(text or "tool failed")
        return text


def scenario_apps(scenario: dict[str, Any]) -> list[str]:
    """Apps a scenario instance touches (its setup, effects and checks)."""
    ops = [e["op"] for e in scenario.get("setup", [])]
    ops += [f["op"] for ev in scenario.get("events", []) for f in ev.get("effects", [])]
    ops += [c["kind"] for ev in scenario.get("events", []) for c in ev.get("checks", [])]
    found = {o.split(".")[0] for o in ops}
    return [a for a in APPS if a in found]


def world_tools(mcp: WorldMCP, apps: list[str], name_rule: str) -> list[Tool]:
    """One :class:`Tool` per MCP tool of each app, named by the harness's rule."""
    out = []
    for app in apps:
        for spec in mcp.list_tools(app):
            read_only = (spec.get("annotations") or {}).get("readOnlyHint", False)

            def run(
                ctx: Any, args: dict[str, Any], app: str = app, tool: str = spec["name"]
            ) -> str:
                return mcp.call(app, tool, args)

            out.append(
                Tool(
                    name=name_rule.format(server=app, tool=spec["name"]),
                    description=spec.get("description", ""),
                    parameters=spec.get("inputSchema") or {"type": "object", "properties": {}},
                    run=run,
                    effect="none" if read_only else "world",
                    source=f"{app}/{spec['name']}",
                )
            )
    return out


def mcp_name_map(tools: list[Tool]) -> dict[str, str]:
    """``"gmail/send_email"`` -> the harness's public name, for the oracle."""
    return {t.source: t.name for t in tools if t.source}


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)
