"""The world's app tools, taken from the tools service's MCP servers (``tools/list``).

Each app is its own MCP server (``/worlds/{id}/mcp/{app}``), as the public Gmail, Slack, Notion
and Calendar servers are, so a harness sees them under its own naming rule for MCP tools
(Claude Code ``mcp__gmail__send_email``, Hermes ``mcp_gmail_send_email``...). Calls go over
HTTP with the world token through the official ``mcp`` client, one session per app for the
episode's run; an ``isError`` result is an error observation.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from services.orchestrator.tools.base import Tool, ToolFailure

APPS = ("gmail", "slack", "calendar", "notion")
T = TypeVar("T")


class WorldMCP:
    """The official ``mcp`` client (``streamable_http_client`` + ``Client``: the
    ``initialize`` handshake, JSON or SSE replies) against a world's per-app MCP endpoints.

    One session per app for the whole run, on an event loop of its own thread, so a tool call
    is one request, not a handshake, a call and a close (the loop calls tools from its tool
    thread, which waits here for the answer). A session whose transport fails is dropped and
    the next call opens a new one; the failed call itself is not repeated (it may have reached
    the world), it is an error observation. :meth:`close` ends the sessions and the thread.
    """

    def __init__(self, tools_client: Any, world_id: str, token: str, timeout_s: float = 60.0):
        self.base_url = tools_client.base_url
        self.world_id = world_id
        self.token = token
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Lock()
        self._sessions: dict[str, _Session] = {}  # touched only on the loop's thread

    def url(self, app: str) -> str:
        return f"{self.base_url}/worlds/{self.world_id}/mcp/{app}"

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._started:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=loop.run_forever, name=f"mcp-{self.world_id}", daemon=True
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    async def _client(self, app: str) -> Any:
        session = self._sessions.get(app)
        if session is None or session.task.done():
            session = self._sessions[app] = _Session(self, app)
        return await asyncio.shield(session.ready)

    async def _drop(self, app: str) -> None:
        session = self._sessions.pop(app, None)
        if session is not None:
            await session.close()

    def _session(self, app: str, work: Callable[[Any], Awaitable[T]]) -> T:
        from mcp.shared.exceptions import MCPError

        async def run() -> T:
            try:
                client = await asyncio.wait_for(self._client(app), self.timeout_s)
                return await asyncio.wait_for(work(client), self.timeout_s)
            except BaseException as exc:
                session = self._sessions.get(app)
                if not isinstance(exc, MCPError) or session is None or session.task.done():
                    await self._drop(app)  # not the server's answer, or the session is gone
                raise

        future = asyncio.run_coroutine_threadsafe(run(), self._running_loop())
        try:
            return future.result(self.timeout_s * 2 + 5)
        except MCPError as exc:
            raise ToolFailure(f"MCP error from {app}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - transport failures (in a task group) too
            future.cancel()
            raise ToolFailure(f"tools service error ({app} MCP): {_first_cause(exc)}") from None

    def list_tools(self, app: str) -> list[Any]:
        """The app's tools (``mcp_types.Tool``); listing twice is harmless, so a session that
        failed is retried once."""

        async def work(c: Any) -> list[Any]:
            return list((await c.list_tools()).tools)

        try:
            return self._session(app, work)
        except ToolFailure as exc:
            if str(exc).startswith("MCP error"):
                raise
            return self._session(app, work)

    def call(self, app: str, name: str, arguments: dict[str, Any]) -> str:
        async def work(c: Any) -> Any:
            return await c.call_tool(name, arguments)

        result = self._session(app, work)
        text = "\n".join(getattr(c, "text", "") for c in result.content if c.type == "text")
        if result.is_error:
            raise ToolFailure(text or "tool failed")
        return text

    def close(self) -> None:
        """End the sessions and their thread (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def drop_all() -> None:
            for app in list(self._sessions):
                await self._drop(app)

        try:
            asyncio.run_coroutine_threadsafe(drop_all(), loop).result(self.timeout_s)
        except Exception:  # noqa: BLE001 - closing: a session that will not close is left
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(self.timeout_s)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None


class _Session:
    """One app's MCP session, owned by a task that opens it, holds it until told to stop and
    closes it (an anyio task group must be left by the task that entered it)."""

    def __init__(self, mcp: WorldMCP, app: str) -> None:
        self.mcp, self.app = mcp, app
        self.ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._own())

    async def _own(self) -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        m = self.mcp
        try:
            http = httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {m.token}"}, timeout=m.timeout_s
            )
            transport = streamable_http_client(m.url(self.app), http_client=http)
            async with http, Client(transport) as client:
                self.ready.set_result(client)
                await self.stop.wait()
        except BaseException as exc:  # noqa: BLE001 - a call waiting for it gets it; a session
            if not self.ready.done():  # that fails later is simply done (the next call reopens)
                self.ready.set_exception(exc)

    async def close(self) -> None:
        self.stop.set()
        if not self.ready.done():
            self.task.cancel()
        try:
            await asyncio.wait_for(self.task, self.mcp.timeout_s)
        except BaseException:  # noqa: BLE001 - a session that failed is closed all the same
            pass


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
