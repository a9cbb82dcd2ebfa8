"""Drive a world as an agent would: MCP tool calls plus the world clock, in-process or over HTTP.

:class:`LocalDriver` runs tools through the MCP tool registry and the clock through the event
engine on the service's own database, without HTTP (the bulk of the scenario tests: 12
scenarios x 3 seeds x 6 agents). :class:`HTTPDriver` does the same against a running service
(``/worlds/{id}/mcp`` with the world token, management routes with the API key). Both speak the
same small protocol, so an oracle or a baseline agent runs unchanged on either.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Protocol

from shared.contracts.tools import ChecksReport, EventInfo


class ToolFailed(RuntimeError):
    """A tool call answered ``isError`` (the agent would see the app's error)."""


class Driver(Protocol):
    world_id: str

    def call(self, tool: str, args: dict[str, Any]) -> Any: ...
    def now(self) -> datetime: ...
    def advance_to(self, when: datetime) -> list[str]: ...
    def events(self) -> list[EventInfo]: ...
    def report(self) -> ChecksReport: ...


def _result(name: str, out: dict[str, Any]) -> Any:
    text = out["content"][0]["text"] if out.get("content") else "{}"
    if out.get("isError"):
        raise ToolFailed(f"{name}: {text[:500]}")
    return out.get("structuredContent", json.loads(text))


class LocalDriver:
    """A world on ``db`` (a ``shared.db.ServiceDatabase``), driven in-process."""

    def __init__(self, db: Any, world_id: str, npc_model_url: str | None = None) -> None:
        self.db = db
        self.world_id = world_id
        self.npc_model_url = npc_model_url

    @classmethod
    def create(cls, db: Any, scenario: str, seed: int, **kw: Any) -> LocalDriver:
        from services.tools.worlds import service

        with db.session() as s:
            row, _ = service.create_world(s, scenario, seed)
            return cls(db, row.id, **kw)

    def fork(self) -> LocalDriver:
        """A new world with this one's exact state (cheaper than building the scenario again)."""
        from services.tools.worlds import service

        with self.db.session() as s:
            row, _ = service.fork_world(s, self.world_id)
            return LocalDriver(self.db, row.id, self.npc_model_url)

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        from services.tools.context import open_world
        from services.tools.mcp.registry import tools_for
        from services.tools.mcp.server import call_tool

        found = tools_for().get(tool)
        if found is None:
            raise ToolFailed(f"unknown tool {tool!r}")
        with self.db.session() as s, open_world(s, self.world_id) as ctx:
            return _result(tool, call_tool(ctx, found, args))

    def now(self) -> datetime:
        from services.tools.context import _aware
        from services.tools.worlds import service

        with self.db.session() as s:
            return _aware(service.get_world(s, self.world_id).clock)

    def advance_to(self, when: datetime) -> list[str]:
        from services.tools.events import engine
        from services.tools.worlds import service

        with self.db.session() as s:
            world = service.get_world(s, self.world_id)
            return engine.advance(s, world, when, self.npc_model_url)["fired"]

    def next_due(self, end: datetime) -> datetime | None:
        """As :func:`next_due`, in one query."""
        from sqlalchemy import func, select

        from services.tools.context import _aware
        from services.tools.models import EventRow, WorldRow

        with self.db.session() as s:
            first = s.scalar(
                select(func.min(EventRow.due_at)).where(
                    EventRow.world_id == self.world_id,
                    EventRow.status == "due",
                    EventRow.due_at <= end,
                )
            )
            if first is None:
                return None
            return max(_aware(first), _aware(s.get(WorldRow, self.world_id).clock))

    def events(self) -> list[EventInfo]:
        from sqlalchemy import select

        from services.tools.context import _aware
        from services.tools.models import EventRow

        with self.db.session() as s:
            rows = s.scalars(
                select(EventRow).where(EventRow.world_id == self.world_id).order_by(EventRow.seq)
            )
            return [
                EventInfo(
                    event_id=r.event_id,
                    title=r.spec.get("title"),
                    status=r.status,
                    due_at=_aware(r.due_at) if r.due_at else None,
                    fired_at=_aware(r.fired_at) if r.fired_at else None,
                    trigger=r.spec.get("trigger"),
                    error=r.spec.get("error"),
                )
                for r in rows
            ]

    def report(self) -> ChecksReport:
        from services.tools.events import engine
        from services.tools.worlds import service

        with self.db.session() as s:
            out = ChecksReport.model_validate(engine.report(s, service.get_world(s, self.world_id)))
            s.rollback()
            return out


class HTTPDriver:
    """A world on a running tools service; ``http`` is any httpx-style client."""

    def __init__(self, http: Any, world_id: str, token: str, api_key: str | None = None) -> None:
        self.http = http
        self.world_id = world_id
        self.token = token
        self.api_key = api_key
        self._id = 0

    def _admin(self, method: str, path: str, **kw: Any) -> Any:
        headers = {"X-API-Key": self.api_key} if self.api_key else {}
        resp = self.http.request(method, f"/worlds/{self.world_id}{path}", headers=headers, **kw)
        if resp.status_code >= 400:
            raise ToolFailed(f"{method} {path} -> {resp.status_code}: {resp.text[:300]}")
        return resp.json()

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        self._id += 1
        resp = self.http.post(
            f"/worlds/{self.world_id}/mcp",
            headers={"Authorization": f"Bearer {self.token}"},
            json={
                "jsonrpc": "2.0",
                "id": self._id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": args},
            },
        )
        body = resp.json()
        if "error" in body:
            raise ToolFailed(f"{tool}: {body['error']}")
        return _result(tool, body["result"])

    def now(self) -> datetime:
        return datetime.fromisoformat(self._admin("GET", "/clock")["now"])

    def advance_to(self, when: datetime) -> list[str]:
        return self._admin("POST", "/clock/advance", json={"to": when.isoformat()})["fired"]

    def events(self) -> list[EventInfo]:
        return [EventInfo.model_validate(e) for e in self._admin("GET", "/events")["events"]]

    def report(self) -> ChecksReport:
        return ChecksReport.model_validate(self._admin("GET", "/checks"))


def next_due(driver: Driver, end: datetime) -> datetime | None:
    """The earliest time something is due before ``end`` (None: nothing more to fire)."""
    fast = getattr(driver, "next_due", None)
    if fast is not None:
        return fast(end)
    now = driver.now()
    due = [e.due_at for e in driver.events() if e.status == "due" and e.due_at is not None]
    due = [max(d, now) for d in due if d <= end]
    return min(due) if due else None
