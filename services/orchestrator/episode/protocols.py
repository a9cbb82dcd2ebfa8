"""What the loop needs from a policy, a world and a sandbox: the interfaces other kinds plug
into (an installed CLI agent's gateway, a rollout's token-in-token-out policy)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from services.orchestrator.context.compaction import Summary
from services.orchestrator.episode.policy import Turn, View


@runtime_checkable
class Policy(Protocol):
    """Produces the agent's turns. ``act`` gets what the agent sees at a step and returns the
    assistant turn (text, tool calls, usage); ``summarize`` writes a compaction's summary
    (plain text, or a :class:`Summary` carrying the call's usage, counted in the budgets).
    ``sections`` are the harness's summary sections, set by the runner."""

    name: str
    sections: list[str]

    def act(self, view: View) -> Turn: ...

    def summarize(self, messages: list[dict[str, Any]], prompt: str) -> str | Summary: ...


class World(Protocol):
    """The episode's world in the tools service (``episode.loop.World`` over ``ToolsClient``)."""

    id: str
    start: datetime
    end: datetime

    def now(self) -> datetime: ...

    def state_hash(self) -> str: ...


class Sandbox(Protocol):
    """The sandbox calls executors make (``shared.clients.SandboxClient``)."""

    def exec(self, sandbox_id: str, command: Any, **kw: Any) -> Any: ...

    def read_file(self, sandbox_id: str, path: str) -> bytes: ...

    def write_file(self, sandbox_id: str, path: str, data: Any) -> Any: ...
