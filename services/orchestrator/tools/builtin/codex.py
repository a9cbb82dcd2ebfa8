"""Codex's built-in tools (shell, exec_command, apply_patch, update_plan, spawn_agent)."""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import Field

from services.orchestrator.tools.builtin.core import (
    Args,
    ToolContext,
    _delegate,
    _output,
    _patch,
    _set_todos,
    builtin,
)

# --- Codex ----------------------------------------------------------------------------------


class ShellArgs(Args):
    command: list[str]
    workdir: str | None = None
    timeout_ms: int | None = Field(None, ge=1)
    justification: str | None = None


@builtin("shell", ShellArgs)
def shell(ctx: ToolContext, a: ShellArgs) -> str:
    """Runs a command (argv) in the sandbox; returns exit code and output."""
    timeout = a.timeout_ms / 1000 if a.timeout_ms else None
    argv = a.command
    if argv and argv[0] in ("apply_patch", "applypatch") and len(argv) == 2:
        return _patch(ctx, argv[1])
    res = ctx.exec(argv, timeout, a.workdir or "")
    return json.dumps(
        {
            "output": _output(res),
            "metadata": {
                "exit_code": res.get("exit_code"),
                "duration_seconds": round((res.get("duration_ms") or 0) / 1000, 1),
            },
        }
    )


class ExecCommandArgs(Args):
    cmd: str
    workdir: str | None = None
    shell: str | None = None
    login: bool | None = None
    tty: bool | None = Field(None, description="Ignored: commands run without a terminal.")
    yield_time_ms: int | None = Field(
        None, ge=1, description="Ignored: the command runs to its end (or the time limit)."
    )
    max_output_tokens: int | None = Field(None, ge=1)
    justification: str | None = None


_PATCH_CMD = re.compile(
    r"^\s*(apply_patch|applypatch)\b.*?(\*\*\* Begin Patch.*\*\*\* End Patch)", re.S
)


@builtin("exec_command", ExecCommandArgs)
def exec_command(ctx: ToolContext, a: ExecCommandArgs) -> str:
    """Runs a shell command line in the sandbox; returns its exit code and output (an
    ``apply_patch`` command line edits files as the apply_patch tool does)."""
    patch = _PATCH_CMD.match(a.cmd)
    if patch:
        return _patch(ctx, patch.group(2))
    argv = [a.shell or "/bin/sh", "-lc" if a.login else "-c", a.cmd]
    res = ctx.exec(argv, None, a.workdir or "")
    out = _output(res)
    if a.max_output_tokens and len(out) > a.max_output_tokens * 4:  # ~4 characters a token
        out = out[: a.max_output_tokens * 4] + "\n[output truncated]"
    wall = round((res.get("duration_ms") or 0) / 1000, 3)
    return f"Exit code: {res.get('exit_code')}\nWall time: {wall} seconds\nOutput:\n{out}"


class ApplyPatchArgs(Args):
    input: str = Field(description="The entire contents of the apply_patch command.")


@builtin("apply_patch", ApplyPatchArgs)
def apply_patch(ctx: ToolContext, a: ApplyPatchArgs) -> str:
    """Edits files with a patch (*** Begin Patch / *** Add|Update|Delete File / *** End Patch)."""
    return _patch(ctx, a.input)


class PlanItem(Args):
    step: str
    status: Literal["pending", "in_progress", "completed"]


class UpdatePlanArgs(Args):
    explanation: str | None = None
    plan: list[PlanItem]


@builtin("update_plan", UpdatePlanArgs, effect="state")
def update_plan(ctx: ToolContext, a: UpdatePlanArgs) -> str:
    """Updates the task plan."""
    _set_todos(ctx, a.plan, "plan")
    return "Plan updated"


class SpawnAgentArgs(Args):
    message: str
    agent_type: str | None = None


@builtin("spawn_agent", SpawnAgentArgs, effect="world")
def spawn_agent(ctx: ToolContext, a: SpawnAgentArgs) -> str:
    """Spawns a sub-agent with a task message and returns its final answer."""
    return _delegate(ctx, a.agent_type or "default", a.message)
