"""The harness-native built-in tools: each harness's public tool and argument names.

One catalogue entry per native tool (key = the name a preset lists; ``Agent@kimi`` where two
harnesses share a public name with different arguments). Executors run against the episode's
:class:`ToolContext`: shell and file tools in the sandbox (through the sandbox API), plan/todo,
memory and skill tools on the episode's own state, subagent tools through the loop.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

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


class ReadArgs(Args):
    file_path: str
    offset: int | None = Field(None, ge=1)
    limit: int | None = Field(None, ge=1)
    pages: str | None = Field(None, description="Page range of a PDF (text files ignore it).")


@builtin("Read", ReadArgs, effect="none")
def read(ctx: ToolContext, a: ReadArgs) -> str:
    """Reads a file (up to 2000 lines, cat -n format)."""
    return _numbered(ctx.read(a.file_path), a.offset or 1, a.limit or 2000)


class WriteArgs(Args):
    file_path: str
    content: str


@builtin("Write", WriteArgs)
def write(ctx: ToolContext, a: WriteArgs) -> str:
    """Writes a file, replacing any existing one."""
    ctx.write(a.file_path, a.content)
    return f"File created successfully at: {a.file_path}"


class EditArgs(Args):
    file_path: str
    old_string: str
    new_string: str
    replace_all: bool = False


@builtin("Edit", EditArgs)
def edit(ctx: ToolContext, a: EditArgs) -> str:
    """Replaces an exact, unique string in a file."""
    return _replace(ctx, a.file_path, a.old_string, a.new_string, a.replace_all)


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


class HermesReadArgs(Args):
    path: str
    offset: int | None = Field(None, ge=1)
    limit: int | None = Field(None, ge=1)


@builtin("read_file", HermesReadArgs, effect="none")
def hermes_read(ctx: ToolContext, a: HermesReadArgs) -> str:
    """Reads a file with line numbers."""
    return _numbered(ctx.read(a.path), a.offset or 1, a.limit or 500)


class HermesWriteArgs(Args):
    path: str
    content: str


@builtin("write_file", HermesWriteArgs)
def hermes_write(ctx: ToolContext, a: HermesWriteArgs) -> str:
    """Writes a file."""
    ctx.write(a.path, a.content)
    return json.dumps({"success": True, "path": a.path})


class PatchArgs(Args):
    path: str
    old_string: str
    new_string: str
    replace_all: bool = False


@builtin("patch", PatchArgs)
def hermes_patch(ctx: ToolContext, a: PatchArgs) -> str:
    """Edits a file by replacing old_string with new_string."""
    return _replace(ctx, a.path, a.old_string, a.new_string, a.replace_all)


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
