"""OpenClaw's built-in tools (read, write, edit, exec, sessions_spawn, memory_search, memory_get)."""

from __future__ import annotations

import json

from pydantic import Field

from services.orchestrator.tools.base import ToolFailure
from services.orchestrator.tools.builtin.core import (
    Args,
    ToolContext,
    _delegate,
    _output,
    _replace,
    builtin,
)

# --- OpenClaw -------------------------------------------------------------------------------


class ClawReadArgs(Args):
    path: str
    offset: int | None = Field(None, ge=1)
    limit: int | None = Field(None, ge=1)


@builtin("read", ClawReadArgs, effect="none")
def claw_read(ctx: ToolContext, a: ClawReadArgs) -> str:
    """Reads a file (text)."""
    lines = ctx.read(a.path).splitlines()
    start = (a.offset or 1) - 1
    return "\n".join(lines[start : start + (a.limit or 2000)])


class ClawWriteArgs(Args):
    path: str
    content: str


@builtin("write", ClawWriteArgs)
def claw_write(ctx: ToolContext, a: ClawWriteArgs) -> str:
    """Writes a file."""
    ctx.write(a.path, a.content)
    return f"Successfully wrote {len(a.content)} bytes to {a.path}"


class ClawEditArgs(Args):
    path: str
    oldText: str  # noqa: N815
    newText: str  # noqa: N815


@builtin("edit", ClawEditArgs)
def claw_edit(ctx: ToolContext, a: ClawEditArgs) -> str:
    """Replaces exact text in a file."""
    return _replace(ctx, a.path, a.oldText, a.newText, False)


class ExecArgs(Args):
    command: str
    workdir: str | None = None
    timeout: int | None = Field(None, ge=1, description="Seconds.")
    background: bool | None = None


@builtin("exec", ExecArgs)
def claw_exec(ctx: ToolContext, a: ExecArgs) -> str:
    """Runs a shell command."""
    res = ctx.exec(a.command, a.timeout, a.workdir or "")
    return _output(res) or f"(exit {res.get('exit_code')})"


class SpawnArgs(Args):
    task: str
    label: str | None = None
    agentId: str | None = None  # noqa: N815


@builtin("sessions_spawn", SpawnArgs, effect="world")
def sessions_spawn(ctx: ToolContext, a: SpawnArgs) -> str:
    """Spawns a sub-agent session for a task and returns its result."""
    return _delegate(ctx, a.agentId or "default", a.task)


class MemorySearchArgs(Args):
    query: str


@builtin("memory_search", MemorySearchArgs, effect="none")
def memory_search(ctx: ToolContext, a: MemorySearchArgs) -> str:
    """Searches memory notes for a query."""
    words = a.query.lower().split()
    hits = [
        {"path": path, "snippet": text[:300]}
        for path, text in ctx.scratch.get("memory_files", {}).items()
        if any(w in text.lower() for w in words)
    ]
    return json.dumps({"results": hits})


class MemoryGetArgs(Args):
    path: str


@builtin("memory_get", MemoryGetArgs, effect="none")
def memory_get(ctx: ToolContext, a: MemoryGetArgs) -> str:
    """Reads one memory file."""
    files = ctx.scratch.get("memory_files", {})
    if a.path not in files:
        raise ToolFailure(f"no memory file {a.path}")
    return files[a.path]
