"""Claude Code's built-in tools (Bash, Read, Write, Edit, Glob, Grep, TodoWrite, Agent, Skill)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

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
    _set_todos,
    _skill,
    builtin,
)

# --- Claude Code ----------------------------------------------------------------------------


class BashArgs(Args):
    command: str
    timeout: int | None = Field(None, ge=1, le=600_000, description="Milliseconds (max 600000).")
    description: str | None = None
    run_in_background: bool | None = None


@builtin("Bash", BashArgs)
def bash(ctx: ToolContext, a: BashArgs) -> str:
    """Executes a bash command in the sandbox and returns its output."""
    timeout = a.timeout / 1000 if a.timeout else 120.0
    return _output(ctx.exec(a.command, timeout)) or "(no output)"


# Claude names the file ``file_path``, and only so (the shared models call it ``path``)
CLAUDE_PATH = ConfigDict(populate_by_name=False)


class ReadArgs(FileRead):
    model_config = CLAUDE_PATH
    path: str = Field(alias="file_path")
    pages: str | None = Field(None, description="Page range of a PDF (text files ignore it).")


@builtin("Read", ReadArgs, effect="none")
def read(ctx: ToolContext, a: ReadArgs) -> str:
    """Reads a file (up to 2000 lines, cat -n format)."""
    return a.numbered(ctx, 2000)


class WriteArgs(FileWrite):
    model_config = CLAUDE_PATH
    path: str = Field(alias="file_path")


@builtin("Write", WriteArgs)
def write(ctx: ToolContext, a: WriteArgs) -> str:
    """Writes a file, replacing any existing one."""
    ctx.write(a.path, a.content)
    return f"File created successfully at: {a.path}"


class EditArgs(FileEdit):
    model_config = CLAUDE_PATH
    path: str = Field(alias="file_path")


@builtin("Edit", EditArgs)
def edit(ctx: ToolContext, a: EditArgs) -> str:
    """Replaces an exact, unique string in a file."""
    return a.apply(ctx)


class GlobArgs(Args):
    pattern: str
    path: str | None = None


@builtin("Glob", GlobArgs, effect="none")
def glob_(ctx: ToolContext, a: GlobArgs) -> str:
    """Finds files by glob pattern."""
    return _find(ctx, a.pattern, a.path or "")


class GrepArgs(Args):
    pattern: str
    path: str | None = None
    glob: str | None = None
    output_mode: Literal["content", "files_with_matches", "count"] | None = None
    case_insensitive: bool | None = Field(None, alias="-i")


@builtin("Grep", GrepArgs, effect="none")
def grep(ctx: ToolContext, a: GrepArgs) -> str:
    """Searches file contents with a regular expression."""
    flags = "-i" if a.case_insensitive else ""
    flags += {"files_with_matches": " -l", "count": " -c"}.get(a.output_mode or "", "")
    return _grep(ctx, a.pattern, a.path or "", flags, a.glob or "")


class ClaudeTodo(Args):
    content: str
    status: Literal["pending", "in_progress", "completed"]
    activeForm: str  # noqa: N815


class TodoWriteArgs(Args):
    todos: list[ClaudeTodo]


@builtin("TodoWrite", TodoWriteArgs, effect="state")
def todo_write(ctx: ToolContext, a: TodoWriteArgs) -> str:
    """Creates and updates the structured task list for this session."""
    _set_todos(ctx, a.todos)
    return "Todos have been modified successfully."


class AgentArgs(Args):
    description: str
    prompt: str
    subagent_type: str
    model: str | None = Field(None, description="Ignored: a sub-agent uses the episode's model.")
    run_in_background: bool | None = Field(None, description="Ignored: it runs to its end.")


@builtin("Agent", AgentArgs, effect="world")
def agent(ctx: ToolContext, a: AgentArgs) -> str:
    """Launches a sub-agent to handle a task on its own and returns its report."""
    return _delegate(ctx, a.subagent_type, a.prompt)


class SkillArgs(Args):
    skill: str
    args: str | None = None


@builtin("Skill", SkillArgs, effect="none")
def skill(ctx: ToolContext, a: SkillArgs) -> str:
    """Loads a skill (its SKILL.md instructions) by name, optionally with arguments for it."""
    text = _skill(ctx, a.skill)
    return text + (f"\n\nArguments: {a.args}" if a.args else "")
