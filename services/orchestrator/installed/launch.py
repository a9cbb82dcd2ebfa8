"""How an installed agent's spec (``agents/<name>.yaml``) becomes one headless invocation.

:func:`invocation` renders the spec's command line (the day's, or the resume one), environment
and config files (the gateway as its model endpoint, the world's apps as its MCP servers) for
one simulated day, writing the files under the CLI's HOME. Every CLI gets its own HOME, telemetry
and update checks off (:data:`QUIET_ENV`), and an MCP start-up timeout of
:data:`MCP_STARTUP_TIMEOUT_S` (a loaded host must not leave an agent without its tools). What a
template cannot express is a named hook (:data:`HOOKS`); :func:`relocate` moves what was rendered
here into a sandbox.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from services.orchestrator.installed.spec import PLACEHOLDER, AgentSpec

QUIET_ENV = {
    # Claude Code
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "IS_SANDBOX": "1",  # root may bypass permission prompts inside a sandbox
    # Codex
    "CODEX_DISABLE_UPDATE_CHECK": "1",
    "NO_COLOR": "1",
}
"""Given to every CLI (each ignores the others' names); a spec's ``env`` adds its own."""

MCP_STARTUP_TIMEOUT_S = 120
"""How long each CLI waits for an MCP server to answer its start-up (and a tool call, 5x): the
CLIs' own defaults (10-30 s) left Codex without any tool on a loaded host."""


@dataclass
class Endpoint:
    """Where the CLI's model calls go and what it is told the model is."""

    base_url: str  # up to, not including, /v1 (Claude Code appends /v1/messages itself)
    token: str
    model: str
    context_window: int = 131_072


@dataclass
class MCPServer:
    name: str
    url: str  # streamable HTTP
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Invocation:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    parser: str = "json-lines"  # how its stdout becomes events (parsers.py)


class RenderError(ValueError):
    """A placeholder the day left unset where the spec needs it."""


_UNSET = object()


def _fill(value: Any, env: dict[str, Any], where: str, optional: bool = False) -> Any:
    """``value`` with its placeholders filled from ``env`` (see spec.py's templates). With
    ``optional``, an unset placeholder makes the whole value :data:`_UNSET`."""
    if isinstance(value, str):
        whole = PLACEHOLDER.fullmatch(value)
        if whole:
            got = env.get(whole.group(1))
            if got is None:
                if optional:
                    return _UNSET
                raise RenderError(f"{where}: {value} is not set")
            return got
        out = []
        for part in PLACEHOLDER.split(value)[1::2]:
            if env.get(part) is None:
                if optional:
                    return _UNSET
                raise RenderError(f"{where}: {{{part}}} is not set")
            out.append(part)
        return PLACEHOLDER.sub(lambda m: str(env[m.group(1)]), value)
    if isinstance(value, dict):
        filled = {}
        for k, v in value.items():
            drop = k.endswith("?")
            key = _fill(k.removesuffix("?"), env, f"{where}.{k}")
            got = _fill(v, env, f"{where}.{k}", optional=drop)
            if drop and (got is _UNSET or got in (None, "", {}, [])):
                continue
            filled[key] = got
        return filled
    if isinstance(value, list):
        return [_fill(v, env, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _argv(items: list[str | list[str]], env: dict[str, Any], where: str) -> list[str]:
    out: list[str] = []
    for i, item in enumerate(items):
        if isinstance(item, list):  # an optional group: all of it, or none
            group = [_fill(a, env, f"{where}[{i}]", optional=True) for a in item]
            if _UNSET not in group:
                out += [str(a) for a in group]
        else:
            out.append(str(_fill(item, env, f"{where}[{i}]")))
    return out


def _toml_key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string for our values
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise RenderError(f"a TOML value cannot be {value!r}")


def toml_text(data: dict[str, Any]) -> str:
    """``data`` as TOML: a table's plain keys, then its sub-tables under ``[a.b]`` headers."""
    lines: list[str] = []

    def table(d: dict[str, Any], path: list[str]) -> None:
        plain = {k: v for k, v in d.items() if not isinstance(v, dict)}
        if path and (plain or len(plain) == len(d)):
            lines.extend(["", f"[{'.'.join(_toml_key(p) for p in path)}]"])
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in plain.items())
        for k, v in d.items():
            if isinstance(v, dict):
                table(v, [*path, k])

    table(data, [])
    return "\n".join(lines).lstrip("\n") + "\n"


def file_text(fmt: str, content: Any) -> str:
    if fmt == "toml":
        return toml_text(content)
    if fmt == "text":
        return content
    return json.dumps(content, indent=1)  # YAML is a superset of JSON: yaml files are JSON too


# -- hooks: generated files a template cannot express -----------------------------------------


@dataclass(frozen=True)
class Hook:
    """``probe``: the binary's arguments whose stdout the hook reads (run once an episode, where
    the CLI runs; its environment: these templates of {home}); ``build``: the files it writes,
    from that stdout and the day's variables."""

    probe: tuple[str, ...]
    probe_env: dict[str, str]
    build: Callable[[str, dict[str, Any]], dict[str, str]]


def _codex_catalog(bundled: str, env: dict[str, Any]) -> dict[str, str]:
    """One catalogue entry for the served model, from the binary's bundled catalogue (written
    at run time, never committed: its instructions are the vendor's text)."""
    models = json.loads(bundled)["models"]
    plain = [m for m in models if not m.get("tool_mode") and not m.get("use_responses_lite")]
    entry = dict((plain or models)[0])
    model, window = env["model"], env["context_window"]
    entry.update(
        slug=model,
        display_name=model,
        apply_patch_tool_type="freeform",
        context_window=window,
        max_context_window=window,
        supported_in_api=True,
        supports_search_tool=False,  # MCP tools offered up front, not behind tool_search
        upgrade=None,
        availability_nux=None,
    )
    return {"model_catalog.json": json.dumps({"models": [entry]})}


HOOKS: dict[str, Hook] = {
    "codex-model-catalog": Hook(
        ("debug", "models", "--bundled"), {"CODEX_HOME": "{home}/.codex"}, _codex_catalog
    ),
}
BUNDLED_CATALOG = HOOKS["codex-model-catalog"].probe
"""Codex's arguments that print its bundled model catalogue (JSON)."""


def base_env(home: Path | str, agent: AgentSpec | None = None) -> dict[str, str]:
    first = [str(d) for d in agent.path_dirs()] if agent is not None else []
    return {
        "HOME": str(home),
        "PATH": ":".join([*first, "/usr/local/bin:/usr/bin:/bin"]),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        **QUIET_ENV,
    }


def probe_env(agent: AgentSpec, hook: str, home: Path | str) -> dict[str, str]:
    """The environment a hook's probe runs with, its HOME ``home``."""
    extra = _fill(HOOKS[hook].probe_env, {"home": str(home)}, f"hooks.{hook}")
    return {**base_env(home, agent), **extra}


def probe(agent: AgentSpec, hook: str, home: Path) -> str:
    """A hook's probe run here (where the CLI runs on this host)."""
    return subprocess.run(
        [str(agent.binary_path()), *HOOKS[hook].probe], capture_output=True, text=True,
        timeout=60, env=probe_env(agent, hook, home), check=True,
    ).stdout  # fmt: skip


def variables(
    agent: AgentSpec, endpoint: Endpoint, home: Path, cwd: Path, prompt: str,
    session_id: str | None, max_turns: int | None, timeout_s: int,
) -> dict[str, Any]:  # fmt: skip
    """The values of spec.py's VARIABLES for one day."""
    return {
        "binary": str(agent.binary_path()),
        "prompt": prompt,
        "model": endpoint.model,
        "session_id": session_id,
        "home": str(home),
        "cwd": str(cwd),
        "base_url": endpoint.base_url,
        "api_base": endpoint.base_url.rstrip("/") + "/v1",
        "token": endpoint.token,
        "context_window": endpoint.context_window,
        "max_turns": max_turns or None,
        "timeout_s": max(60, int(timeout_s)),
        "mcp_startup_timeout_s": MCP_STARTUP_TIMEOUT_S,
        "mcp_startup_timeout_ms": MCP_STARTUP_TIMEOUT_S * 1000,
        "mcp_tool_timeout_s": MCP_STARTUP_TIMEOUT_S * 5,
        "mcp_tool_timeout_ms": MCP_STARTUP_TIMEOUT_S * 5000,
    }


def invocation(
    agent: AgentSpec,
    endpoint: Endpoint,
    home: Path,
    cwd: Path,
    prompt: str,
    session_id: str | None = None,
    resume: bool = False,
    mcp: list[MCPServer] | None = None,
    max_turns: int | None = None,
    timeout_s: int = 3600,
    probes: dict[str, str] | None = None,
) -> Invocation:
    """One day of ``agent``: its files written under ``home``, its argv and environment.
    ``session_id``: the episode's own id, or the one the CLI reported (a later day with one
    runs the spec's resume command). ``probes``: each hook's probe output, as the binary printed
    it where it runs (here, run on this host, when not given)."""
    home.mkdir(parents=True, exist_ok=True)
    env = variables(agent, endpoint, home, cwd, prompt, session_id, max_turns, timeout_s)
    if agent.mcp is not None:
        servers: dict[str, Any] = {}
        for s in mcp or []:
            local = {**env, "name": s.name, "url": s.url, "headers": dict(s.headers)}
            servers[_fill(agent.mcp.key, local, "mcp.key")] = _fill(
                agent.mcp.server, local, "mcp.server"
            )
        env["mcp_servers"] = servers
    for name, f in agent.files.items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(file_text(f.format, _fill(f.content, env, f"files.{name}.content")))
    for name in agent.hooks:
        printed = (probes or {}).get(name)
        if printed is None:
            printed = probe(agent, name, home)
        for rel, text in HOOKS[name].build(printed, env).items():
            (home / rel).write_text(text)
    use_resume = resume and session_id and agent.command.resume is not None
    which = "resume" if use_resume else "day"
    argv = _argv(getattr(agent.command, which), env, f"command.{which}")
    extra = {k: str(_fill(v, env, f"env.{k}")) for k, v in agent.env.items()}
    return Invocation(
        [str(agent.binary_path()), *argv], {**base_env(home, agent), **extra}, cwd,
        agent.output.parser,
    )  # fmt: skip


def relocate(inv: Invocation, staging: Path, guest_home: str) -> tuple[Invocation, dict[str, str]]:
    """``inv`` as it runs in a sandbox: the files the invocation wrote under ``staging`` (its
    HOME here) become guest files under ``guest_home``, and every mention of ``staging`` in
    argv, environment and those files is rewritten. Returns the invocation and the files."""
    old = str(staging)

    def move(text: str) -> str:
        return text.replace(old, guest_home)

    files = {move(str(p)): move(p.read_text()) for p in sorted(staging.rglob("*")) if p.is_file()}
    moved = replace(
        inv, argv=[move(a) for a in inv.argv], env={k: move(v) for k, v in inv.env.items()}
    )
    return moved, files
