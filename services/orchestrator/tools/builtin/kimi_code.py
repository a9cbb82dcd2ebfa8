"""Kimi Code's built-in tools (Shell, ReadFile, WriteFile, StrReplaceFile, SetTodoList, Agent)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from services.orchestrator.tools.base import ToolFailure
from services.orchestrator.tools.builtin.core import (
    Args,
    ToolContext,
    _delegate,
    _numbered,
    _output,
    _replace,
    _set_todos,
    builtin,
)

# --- Kimi Code ------------------------------------------------------------------------------


class KimiShellArgs(Args):
    command: str
    timeout: int | None = Field(None, ge=1, le=300, description="Seconds.")
    run_in_background: bool | None = None


@builtin("Shell", KimiShellArgs)
def kimi_shell(ctx: ToolContext, a: KimiShellArgs) -> str:
    """Executes a shell command."""
    res = ctx.exec(a.command, a.timeout)
    return _output(res) + f"\nCommand executed with exit code {res.get('exit_code')}."


class ReadFileArgs(Args):
    path: str
    line_offset: int | None = Field(None, ge=1)
    n_lines: int | None = Field(None, ge=1)


@builtin("ReadFile", ReadFileArgs, effect="none")
def read_file(ctx: ToolContext, a: ReadFileArgs) -> str:
    """Reads a text file, numbered by line."""
    return _numbered(ctx.read(a.path), a.line_offset or 1, a.n_lines or 1000)


class WriteFileArgs(Args):
    path: str
    content: str
    mode: Literal["overwrite", "append"] = "overwrite"


@builtin("WriteFile", WriteFileArgs)
def write_file(ctx: ToolContext, a: WriteFileArgs) -> str:
    """Writes (or appends to) a file."""
    text = a.content
    if a.mode == "append":
        try:
            text = ctx.read(a.path) + text
        except ToolFailure:
            pass
    ctx.write(a.path, text)
    return f"File successfully written: {a.path}"


class KimiEdit(Args):
    old: str
    new: str
    replace_all: bool = False


class StrReplaceFileArgs(Args):
    path: str
    edit: KimiEdit


@builtin("StrReplaceFile", StrReplaceFileArgs)
def str_replace_file(ctx: ToolContext, a: StrReplaceFileArgs) -> str:
    """Replaces a string in a file."""
    return _replace(ctx, a.path, a.edit.old, a.edit.new, a.edit.replace_all)


class KimiTodo(Args):
    title: str
    status: Literal["Pending", "In Progress", "Done"]


class SetTodoListArgs(Args):
    todos: list[KimiTodo]


@builtin("SetTodoList", SetTodoListArgs, effect="state")
def set_todo_list(ctx: ToolContext, a: SetTodoListArgs) -> str:
    """Sets the whole todo list."""
    _set_todos(ctx, a.todos)
    return "Todo list updated"


class KimiAgentArgs(Args):
    description: str
    prompt: str
    subagent_type: str
    resume: str | None = None


@builtin("Agent@kimi", KimiAgentArgs, effect="world", name="Agent")
def kimi_agent(ctx: ToolContext, a: KimiAgentArgs) -> str:
    """Delegates a task to a sub-agent (coder, explore, plan) and returns its result."""
    return _delegate(ctx, a.subagent_type, a.prompt)
