"""Hermes's built-in tools (terminal, read_file, write_file, patch, search_files, todo, memory,
skill_view, delegate_task).
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from services.orchestrator.tools.base import ToolFailure
from services.orchestrator.tools.builtin.core import (
    Args,
    FileEdit,
    FileRead,
    FileWrite,
    ToolContext,
    _delegate,
    _find,
    _grep,
    _output,
    _plain,
    _set_todos,
    _skill,
    builtin,
)

# --- Hermes ---------------------------------------------------------------------------------


class TerminalArgs(Args):
    command: str
    background: bool | None = None
    timeout: int | None = Field(None, ge=1)
    workdir: str | None = None


@builtin("terminal", TerminalArgs)
def terminal(ctx: ToolContext, a: TerminalArgs) -> str:
    """Runs a command in the terminal."""
    res = ctx.exec(a.command, a.timeout, a.workdir or "")
    return json.dumps({"output": _output(res), "exit_code": res.get("exit_code")})


class HermesReadArgs(FileRead):
    pass


@builtin("read_file", HermesReadArgs, effect="none")
def hermes_read(ctx: ToolContext, a: HermesReadArgs) -> str:
    """Reads a file with line numbers."""
    return a.numbered(ctx, 500)


class HermesWriteArgs(FileWrite):
    pass


@builtin("write_file", HermesWriteArgs)
def hermes_write(ctx: ToolContext, a: HermesWriteArgs) -> str:
    """Writes a file."""
    ctx.write(a.path, a.content)
    return json.dumps({"success": True, "path": a.path})


class PatchArgs(FileEdit):
    pass


@builtin("patch", PatchArgs)
def hermes_patch(ctx: ToolContext, a: PatchArgs) -> str:
    """Edits a file by replacing old_string with new_string."""
    return a.apply(ctx)


class SearchFilesArgs(Args):
    pattern: str
    target: Literal["content", "files"] = "content"
    path: str | None = None
    file_glob: str | None = None


@builtin("search_files", SearchFilesArgs, effect="none")
def search_files(ctx: ToolContext, a: SearchFilesArgs) -> str:
    """Searches file contents (or names) under a path."""
    if a.target == "files":
        return _find(ctx, a.pattern, a.path or "")
    return _grep(ctx, a.pattern, a.path or "", "", a.file_glob or "")


class HermesTodo(Args):
    id: str
    content: str
    status: Literal["pending", "in_progress", "completed", "cancelled"]


class HermesTodoArgs(Args):
    todos: list[HermesTodo] | None = None
    merge: bool = False


@builtin("todo", HermesTodoArgs, effect="state")
def hermes_todo(ctx: ToolContext, a: HermesTodoArgs) -> str:
    """Reads (no todos) or writes the task list; merge updates items by id."""
    if a.todos is None:
        return json.dumps({"todos": ctx.scratch.get("todos", [])})
    todos = _plain(a.todos)
    if a.merge:
        by_id = {t["id"]: t for t in ctx.scratch.get("todos", [])}
        by_id.update({t["id"]: t for t in todos})
        todos = list(by_id.values())
    return _set_todos(ctx, todos)


class MemoryArgs(Args):
    action: Literal["add", "replace", "remove"]
    target: Literal["memory", "user"] = "memory"
    content: str | None = None
    old_text: str | None = None


MEMORY_LIMITS = {"memory": 2200, "user": 1375}


@builtin("memory", MemoryArgs, effect="state")
def hermes_memory(ctx: ToolContext, a: MemoryArgs) -> str:
    """Adds, replaces or removes an entry of persistent memory (MEMORY.md / USER.md)."""
    entries: list[str] = ctx.scratch.setdefault("memory", {}).setdefault(a.target, [])
    if a.action in ("replace", "remove"):
        old = a.old_text or ""
        idx = next((i for i, e in enumerate(entries) if old and old in e), None)
        if idx is None:
            raise ToolFailure(f"no {a.target} entry contains {old!r}")
        if a.action == "remove":
            entries.pop(idx)
        else:
            entries[idx] = a.content or ""
    else:
        if not a.content:
            raise ToolFailure("content is required to add an entry")
        entries.append(a.content)
    used = sum(len(e) for e in entries)
    if used > MEMORY_LIMITS[a.target]:
        entries.pop() if a.action == "add" else None
        raise ToolFailure(f"{a.target} memory is full ({MEMORY_LIMITS[a.target]} chars)")
    return json.dumps({"success": True, "entries": len(entries), "chars": used})


class SkillViewArgs(Args):
    name: str


@builtin("skill_view", SkillViewArgs, effect="none")
def skill_view(ctx: ToolContext, a: SkillViewArgs) -> str:
    """Shows a skill's SKILL.md."""
    return _skill(ctx, a.name)


class DelegateArgs(Args):
    goal: str
    context: str | None = None
    toolsets: list[str] | None = None


@builtin("delegate_task", DelegateArgs, effect="world")
def delegate_task(ctx: ToolContext, a: DelegateArgs) -> str:
    """Delegates a goal to a sub-agent and returns its summary."""
    prompt = a.goal + (f"\n\nContext:\n{a.context}" if a.context else "")
    return _delegate(ctx, "default", prompt)
