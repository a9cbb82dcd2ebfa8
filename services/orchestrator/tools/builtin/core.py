"""What every harness's tools share: the :class:`ToolContext` executors run against, the
:data:`CATALOGUE` and its :func:`builtin` registering decorator, the shared executors (output,
edits, patches, todos, grep, skills, delegation) and the name checks presets go through.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.orchestrator import apply_patch as patchlib
from services.orchestrator.tools.base import Effect, Tool, ToolFailure, ToolSet, schema_of


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


@dataclass
class ToolContext:
    """What executors reach: the sandbox, the episode's scratch state, skills, subagents."""

    sandbox: Any = None  # SandboxClient
    sandbox_id: str | None = None
    cwd: str = "/root"
    scratch: dict[str, Any] = field(default_factory=dict)  # todos, plan, memory: persisted
    skills: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> {description, body}
    subagent: Callable[[str, str], str] | None = None  # (agent type, prompt) -> final text
    timeout_s: float = 120.0

    # sandbox helpers ------------------------------------------------------------------------

    def _need_sandbox(self) -> None:
        if self.sandbox is None or self.sandbox_id is None:
            raise ToolFailure("this episode has no sandbox: shell and file tools are unavailable")

    def exec(self, command: str | list[str], timeout_s: float | None = None, cwd: str = "") -> dict:
        self._need_sandbox()
        from shared.clients import ServiceError

        timeout = min(timeout_s or self.timeout_s, self.timeout_s)
        try:
            out = self.sandbox.exec(self.sandbox_id, command, timeout=timeout, cwd=cwd or self.cwd)
            return out.model_dump() if hasattr(out, "model_dump") else dict(out)
        except ServiceError as exc:
            raise ToolFailure(f"sandbox error: {exc}") from None

    def read(self, path: str) -> str:
        self._need_sandbox()
        from shared.clients import ServiceError

        try:
            return self.sandbox.read_file(self.sandbox_id, self.abs(path)).decode(
                "utf-8", "replace"
            )
        except ServiceError as exc:
            raise ToolFailure(f"cannot read {path}: {exc}") from None

    def write(self, path: str, text: str) -> None:
        self._need_sandbox()
        from shared.clients import ServiceError

        try:
            self.sandbox.write_file(self.sandbox_id, self.abs(path), text)
        except ServiceError as exc:
            raise ToolFailure(f"cannot write {path}: {exc}") from None

    def abs(self, path: str) -> str:
        return patchlib.resolve(path, self.cwd)


class SandboxFS:
    """apply_patch's file system over the sandbox API (errors as OSError)."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    def read_text(self, path: str) -> str:
        try:
            return self.ctx.read(path)
        except ToolFailure as exc:
            raise OSError(str(exc)) from None

    def write_text(self, path: str, text: str) -> None:
        try:
            self.ctx.write(path, text)
        except ToolFailure as exc:
            raise OSError(str(exc)) from None

    def remove(self, path: str) -> None:
        from shared.clients import ServiceError

        self.ctx._need_sandbox()
        try:
            self.ctx.sandbox.remove(self.ctx.sandbox_id, self.ctx.abs(path))
        except ServiceError as exc:
            raise OSError(str(exc)) from None


CATALOGUE: dict[str, Tool] = {}


def builtin(
    key: str, args: type[Args], effect: Effect = "sandbox", name: str | None = None
) -> Callable[[Callable[[ToolContext, Any], str]], Callable]:
    """Register an executor as catalogue entry ``key`` (public name ``name`` or ``key``); the
    executor is called with a validated ``args`` instance."""

    def register(fn: Callable[[ToolContext, Any], str]) -> Callable:
        CATALOGUE[key] = Tool(
            name=name or key,
            description=" ".join((fn.__doc__ or key).split()),
            parameters=schema_of(args),
            run=fn,
            effect=effect,
            args_model=args,
        )
        return fn

    return register


# --- shared executors -----------------------------------------------------------------------


def _output(res: dict[str, Any]) -> str:
    out = (res.get("stdout") or "") + (res.get("stderr") or "")
    if res.get("timed_out"):
        out += "\n[command timed out]"
    return out


def _numbered(text: str, offset: int, limit: int) -> str:
    lines = text.splitlines()
    start = max(offset, 1)
    picked = lines[start - 1 : start - 1 + limit]
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(picked, start))


def _replace(ctx: ToolContext, path: str, old: str, new: str, replace_all: bool) -> str:
    text = ctx.read(path)
    count = text.count(old)
    if not old or count == 0:
        raise ToolFailure(f"old string not found in {path}")
    if count > 1 and not replace_all:
        raise ToolFailure(
            f"old string occurs {count} times in {path}; make it unique or use replace_all"
        )
    ctx.write(path, text.replace(old, new) if replace_all else text.replace(old, new, 1))
    return f"The file {path} has been updated ({count if replace_all else 1} replacement)."


class FileRead(Args):
    """A numbered read of part of a file (Claude's ``Read``, Hermes's ``read_file``); a harness
    renames ``path`` with an alias to its own argument name."""

    path: str
    offset: int | None = Field(None, ge=1)
    limit: int | None = Field(None, ge=1)

    def numbered(self, ctx: ToolContext, lines: int) -> str:
        """The lines asked for, ``lines`` of them unless ``limit`` says."""
        return _numbered(ctx.read(self.path), self.offset or 1, self.limit or lines)


class FileWrite(Args):
    """A whole file written (Claude's ``Write``, Hermes's ``write_file``)."""

    path: str
    content: str


class FileEdit(Args):
    """An exact string replaced in a file (Claude's ``Edit``, Hermes's ``patch``)."""

    path: str
    old_string: str
    new_string: str
    replace_all: bool = False

    def apply(self, ctx: ToolContext) -> str:
        return _replace(ctx, self.path, self.old_string, self.new_string, self.replace_all)


def _patch(ctx: ToolContext, text: str) -> str:
    try:
        hunks = patchlib.parse_patch(text)
    except patchlib.ParseError as exc:
        raise ToolFailure(patchlib.describe_parse_error(exc)) from None
    try:
        return patchlib.apply_hunks(hunks, SandboxFS(ctx), ctx.cwd).summary()
    except patchlib.PatchError as exc:
        raise ToolFailure(str(exc)) from None


def _plain(items: list[Any]) -> list[dict[str, Any]]:
    """Validated items as the JSON the episode state persists (the names the model used)."""
    return [
        i.model_dump(by_alias=True, exclude_none=True) if isinstance(i, BaseModel) else i
        for i in items
    ]


def _set_todos(ctx: ToolContext, todos: list[Any], key: str = "todos") -> str:
    todos = _plain(todos)
    ctx.scratch[key] = todos
    return json.dumps({key: todos})


def _grep(ctx: ToolContext, pattern: str, path: str, flags: str = "", glob: str = "") -> str:
    cmd = f"grep -rn {flags} -e {shlex.quote(pattern)} {shlex.quote(path or '.')}"
    if glob:
        cmd += f" --include={shlex.quote(glob)}"
    return _output(ctx.exec(cmd)) or "No matches found"


def _find(ctx: ToolContext, pattern: str, path: str) -> str:
    cmd = f"find {shlex.quote(path or '.')} -path {shlex.quote('*' + pattern.lstrip('*'))}"
    return _output(ctx.exec(cmd)) or "No files found"


def _skill(ctx: ToolContext, name: str) -> str:
    skill = ctx.skills.get(name)
    if skill is None:
        raise ToolFailure(f"unknown skill {name!r}; available: {', '.join(sorted(ctx.skills))}")
    return skill["body"]


def _delegate(ctx: ToolContext, agent_type: str, prompt: str) -> str:
    if ctx.subagent is None:
        raise ToolFailure("subagents are not available in this episode")
    return ctx.subagent(agent_type, prompt)


class UnknownTools(ValueError):
    """A harness names tools the catalogue does not have."""


def check_tool_names(names: list[str]) -> None:
    """The harness names its tools and the catalogue resolves them: an unknown name is an
    error listing the known ones (raised at submit, before anything runs)."""
    unknown = [n for n in names if n not in CATALOGUE]
    if unknown:
        raise UnknownTools(f"tools: unknown tools {unknown}; known: {sorted(CATALOGUE)}")


def toolset_of(names: list[str]) -> ToolSet:
    """The catalogue entries ``names`` lists, in that order."""
    check_tool_names(names)
    tools = ToolSet()
    for key in names:
        tools.add(CATALOGUE[key])
    return tools
