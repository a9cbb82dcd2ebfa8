"""How each real CLI is started headless against a k3stack endpoint: argv, environment, files.

Claude Code: ``claude -p PROMPT --output-format stream-json --verbose`` with ``ANTHROPIC_BASE_URL``
and ``ANTHROPIC_AUTH_TOKEN``, the world's apps as ``--mcp-config`` (``--strict-mcp-config``: no
other servers), a fixed ``--session-id`` on day one and ``--resume`` after. Codex: ``codex exec
--json`` with a generated ``$CODEX_HOME/config.toml`` (one ``model_providers`` entry,
``wire_api = "responses"``, the world's apps as ``[mcp_servers]``) and a ``model_catalog_json``
holding one entry for the served model, cut from the binary's own bundled catalogue with
``apply_patch_tool_type = "freeform"`` (Codex offers ``apply_patch`` only to catalogued models);
day two on is ``codex exec resume SESSION``. Kimi Code: ``kimi -p PROMPT --output-format
stream-json`` (print mode approves its tools itself) with a generated ``$KIMI_CODE_HOME/config.toml``
(one ``type = "openai"`` provider: Chat Completions at the gateway's ``/v1``, the key from an
environment variable) and ``mcp.json`` (the world's apps, tools named ``mcp__<app>__<tool>``);
day two on adds ``--session ID`` (the ``session.resume_hint`` event of day one); it runs with the
pinned Node first on PATH. OpenClaw: ``openclaw agent --local --session-id ID --message PROMPT
--json`` (the same id every day resumes it) with a generated ``$OPENCLAW_CONFIG_PATH`` (one
``openai-completions`` provider at the gateway, Tool Search off so every tool's schema is offered
up front, the world's apps under ``mcp.servers`` keyed ``mcp__<app>``: OpenClaw names a server's
tools ``<server>__<tool>``, so they read ``mcp__<app>__<tool>`` as the other CLIs' do); its
stdout is one JSON envelope. Hermes (a Python venv): ``hermes chat -q PROMPT -Q --yolo`` with a
generated ``$HERMES_HOME/config.yaml`` (a ``custom`` provider: Chat Completions at the gateway;
the world's apps under ``mcp_servers``, tools named ``mcp__<app>__<tool>``, hyphens as
underscores); its quiet stdout is the final text and a ``session_id: ID`` line, and day two on
adds ``--resume ID``. Every CLI's MCP start-up timeout is :data:`MCP_STARTUP_TIMEOUT_S`
(a loaded host must not leave an agent without its tools). Telemetry, update checks and other
traffic are off, and each gets its own HOME, so nothing from the machine's user leaks in.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from services.orchestrator.installed.catalog import Agent

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
    text_output: bool = False  # stdout is text, not JSON lines (Hermes's quiet mode)


def _base_env(home: Path, agent: Agent | None = None) -> dict[str, str]:
    first = [str(d) for d in agent.path_dirs()] if agent is not None else []
    return {
        "HOME": str(home),
        "PATH": ":".join([*first, "/usr/local/bin:/usr/bin:/bin"]),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        **QUIET_ENV,
    }


def claude_invocation(
    agent: Agent,
    endpoint: Endpoint,
    home: Path,
    cwd: Path,
    prompt: str,
    session_id: str,
    resume: bool = False,
    mcp: list[MCPServer] | None = None,
    max_turns: int | None = None,
) -> Invocation:
    home.mkdir(parents=True, exist_ok=True)
    servers = {s.name: {"type": "http", "url": s.url, "headers": s.headers} for s in mcp or []}
    mcp_file = home / "mcp.json"
    mcp_file.write_text(json.dumps({"mcpServers": servers}))
    argv = [
        str(agent.binary_path()),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        endpoint.model,
        "--mcp-config",
        str(mcp_file),
        "--strict-mcp-config",
        "--dangerously-skip-permissions",
        *(["--resume", session_id] if resume else ["--session-id", session_id]),
        *(["--max-turns", str(max_turns)] if max_turns else []),
    ]
    env = {
        **_base_env(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": endpoint.base_url,
        "ANTHROPIC_AUTH_TOKEN": endpoint.token,
        "ANTHROPIC_MODEL": endpoint.model,
        "ANTHROPIC_SMALL_FAST_MODEL": endpoint.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": endpoint.model,
        "ENABLE_TOOL_SEARCH": "false",  # the world's MCP tools offered up front, not deferred
        "MCP_TIMEOUT": str(MCP_STARTUP_TIMEOUT_S * 1000),
        "MCP_TOOL_TIMEOUT": str(MCP_STARTUP_TIMEOUT_S * 5000),
    }
    return Invocation(argv, env, cwd)


BUNDLED_CATALOG = ("debug", "models", "--bundled")
"""Codex's arguments that print its bundled model catalogue (JSON)."""


def codex_catalog(
    agent: Agent, model: str, context_window: int, home: Path, bundled: str | None = None
) -> Path:
    """One catalogue entry for ``model``, from the binary's bundled catalogue (written at run
    time, never committed: its instructions are the vendor's text). ``bundled``: that
    catalogue as the binary printed it where it runs (here, on the host, when not given)."""
    if bundled is None:
        bundled = subprocess.run(
            [str(agent.binary_path()), *BUNDLED_CATALOG],
            capture_output=True,
            text=True,
            timeout=60,
            env={**_base_env(home), "CODEX_HOME": str(home / ".codex")},
            check=True,
        ).stdout
    models = json.loads(bundled)["models"]
    plain = [m for m in models if not m.get("tool_mode") and not m.get("use_responses_lite")]
    entry = dict((plain or models)[0])
    entry.update(
        slug=model,
        display_name=model,
        apply_patch_tool_type="freeform",
        context_window=context_window,
        max_context_window=context_window,
        supported_in_api=True,
        supports_search_tool=False,  # MCP tools offered up front, not behind tool_search
        upgrade=None,
        availability_nux=None,
    )
    path = home / "model_catalog.json"
    path.write_text(json.dumps({"models": [entry]}))
    return path


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for our values


def codex_config(
    agent: Agent, endpoint: Endpoint, home: Path, mcp: list[MCPServer] | None = None,
    bundled: str | None = None,
) -> Path:  # fmt: skip
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    catalog = codex_catalog(agent, endpoint.model, endpoint.context_window, home, bundled)
    lines = [
        f"model = {_toml_str(endpoint.model)}",
        'model_provider = "k3stack"',
        f"model_catalog_json = {_toml_str(str(catalog))}",
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        "hide_agent_reasoning = false",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[model_providers.k3stack]",
        'name = "k3stack"',
        f"base_url = {_toml_str(endpoint.base_url.rstrip('/') + '/v1')}",
        'wire_api = "responses"',
        'env_key = "K3STACK_AGENT_TOKEN"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
    ]
    for s in mcp or []:
        lines += ["", f"[mcp_servers.{s.name}]", f"url = {_toml_str(s.url)}",
                  f"startup_timeout_sec = {MCP_STARTUP_TIMEOUT_S}",
                  f"tool_timeout_sec = {MCP_STARTUP_TIMEOUT_S * 5}"]  # fmt: skip
        if s.headers:
            pairs = ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in s.headers.items())
            lines.append(f"http_headers = {{ {pairs} }}")
    path = codex_home / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def codex_invocation(
    agent: Agent,
    endpoint: Endpoint,
    home: Path,
    cwd: Path,
    prompt: str,
    session_id: str | None = None,
    mcp: list[MCPServer] | None = None,
    bundled: str | None = None,
) -> Invocation:
    """Day one: ``codex exec``; later days resume ``session_id`` (from day one's events)."""
    codex_config(agent, endpoint, home, mcp, bundled)
    head = [str(agent.binary_path()), "exec"]
    if session_id:
        head.append("resume")
    argv = [
        *head,
        "--json",
        "--skip-git-repo-check",
        *(["--cd", str(cwd)] if not session_id else []),
        *([session_id] if session_id else []),
        prompt,
    ]
    env = {
        **_base_env(home),
        "CODEX_HOME": str(home / ".codex"),
        "K3STACK_AGENT_TOKEN": endpoint.token,
    }
    return Invocation(argv, env, cwd)


def kimi_config(
    endpoint: Endpoint, home: Path, mcp: list[MCPServer] | None = None,
    max_turns: int | None = None,
) -> Path:  # fmt: skip
    """``$KIMI_CODE_HOME``: ``config.toml`` (the gateway as its one provider and model) and
    ``mcp.json`` (the world's apps over streamable HTTP)."""
    kimi_home = home / ".kimi-code"
    kimi_home.mkdir(parents=True, exist_ok=True)
    model = _toml_str(endpoint.model)
    lines = [
        f"default_model = {model}",
        "telemetry = false",
        "",
        "[providers.k3stack]",
        'type = "openai"',
        f"base_url = {_toml_str(endpoint.base_url.rstrip('/') + '/v1')}",
        'api_key_env = "K3STACK_AGENT_TOKEN"',
        "",
        f"[models.{model}]",
        'provider = "k3stack"',
        f"model = {model}",
        f"max_context_size = {endpoint.context_window}",
        "",
        "[mcp]",
        f"startup_timeout_ms = {MCP_STARTUP_TIMEOUT_S * 1000}",
        f"tool_timeout_ms = {MCP_STARTUP_TIMEOUT_S * 5000}",
    ]
    # one retry of a failed model call (its default, 10 with back-off, outlasts a day's budget)
    lines += ["", "[loop_control]", "max_attempts_per_step = 2"]
    if max_turns:
        lines.append(f"max_steps_per_turn = {max_turns}")
    (kimi_home / "config.toml").write_text("\n".join(lines) + "\n")
    servers = {
        s.name: {"transport": "http", "url": s.url, "headers": s.headers,
                 "startupTimeoutMs": MCP_STARTUP_TIMEOUT_S * 1000}
        for s in mcp or []
    }  # fmt: skip
    (kimi_home / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    return kimi_home


def kimi_invocation(
    agent: Agent,
    endpoint: Endpoint,
    home: Path,
    cwd: Path,
    prompt: str,
    session_id: str | None = None,
    mcp: list[MCPServer] | None = None,
    max_turns: int | None = None,
) -> Invocation:
    """Day one: a new session; later days ``--session`` the one day one reported."""
    kimi_home = kimi_config(endpoint, home, mcp, max_turns)
    argv = [
        str(agent.binary_path()),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        *(["--session", session_id] if session_id else []),
    ]
    env = {
        **_base_env(home, agent),
        "KIMI_CODE_HOME": str(kimi_home),
        "K3STACK_AGENT_TOKEN": endpoint.token,
    }
    return Invocation(argv, env, cwd)


def openclaw_invocation(
    agent: Agent,
    endpoint: Endpoint,
    home: Path,
    cwd: Path,
    prompt: str,
    session_id: str,
    mcp: list[MCPServer] | None = None,
    timeout_s: int = 3600,
) -> Invocation:
    """One embedded (gateway-less) agent turn in session ``session_id``."""
    root = home / ".openclaw"
    (root / "state").mkdir(parents=True, exist_ok=True)
    (root / "state" / ".keep").write_text("")  # the state folder must exist before a run
    model = {"id": endpoint.model, "name": endpoint.model, "reasoning": False, "input": ["text"],
             "contextWindow": endpoint.context_window, "maxTokens": 4096}  # fmt: skip
    provider = {"baseUrl": endpoint.base_url.rstrip("/") + "/v1", "api": "openai-completions",
                "apiKey": "${K3STACK_AGENT_TOKEN}", "models": [model]}  # fmt: skip
    servers = {
        f"mcp__{s.name}": {"url": s.url, "transport": "streamable-http", "headers": s.headers,
                           "connectionTimeoutMs": MCP_STARTUP_TIMEOUT_S * 1000,
                           "requestTimeoutMs": MCP_STARTUP_TIMEOUT_S * 5000}
        for s in mcp or []
    }  # fmt: skip
    config = {
        "models": {"mode": "merge", "providers": {"k3stack": provider}},
        "agents": {"defaults": {"model": {"primary": f"k3stack/{endpoint.model}"}}},
        "tools": {"toolSearch": False},
        "mcp": {"servers": servers},
    }
    path = root / "openclaw.json"
    path.write_text(json.dumps(config, indent=1))
    argv = [
        str(agent.binary_path()), "agent", "--local", "--session-id", session_id,
        "--message", prompt, "--json", "--timeout", str(timeout_s),
    ]  # fmt: skip
    env = {
        **_base_env(home, agent),
        "OPENCLAW_CONFIG_PATH": str(path),
        "OPENCLAW_STATE_DIR": str(root / "state"),
        "K3STACK_AGENT_TOKEN": endpoint.token,
    }
    return Invocation(argv, env, cwd)


def hermes_invocation(
    agent: Agent,
    endpoint: Endpoint,
    home: Path,
    cwd: Path,
    prompt: str,
    session_id: str | None = None,
    mcp: list[MCPServer] | None = None,
    max_turns: int | None = None,
) -> Invocation:
    """Day one: a new session; later days ``--resume`` the one day one printed."""
    hermes_home = home / ".hermes"
    hermes_home.mkdir(parents=True, exist_ok=True)
    servers = {
        s.name: {"url": s.url, "headers": s.headers, "connect_timeout": MCP_STARTUP_TIMEOUT_S,
                 "timeout": MCP_STARTUP_TIMEOUT_S * 5}
        for s in mcp or []
    }  # fmt: skip
    config = {
        "model": {"provider": "custom", "base_url": endpoint.base_url.rstrip("/") + "/v1",
                  "api_key": endpoint.token, "default": endpoint.model,
                  "context_length": endpoint.context_window},
        "mcp_servers": servers,
    }  # fmt: skip
    # YAML is a superset of JSON: the config is written as JSON
    (hermes_home / "config.yaml").write_text(json.dumps(config, indent=1))
    argv = [
        str(agent.binary_path()), "chat", "-q", prompt, "-Q", "--yolo",
        *(["--max-turns", str(max_turns)] if max_turns else []),
        *(["--resume", session_id] if session_id else []),
    ]  # fmt: skip
    env = {**_base_env(home, agent), "HERMES_HOME": str(hermes_home)}
    return Invocation(argv, env, cwd, text_output=True)


def relocate(inv: Invocation, staging: Path, guest_home: str) -> tuple[Invocation, dict[str, str]]:
    """``inv`` as it runs in a sandbox: the files the invocation wrote under ``staging`` (its
    HOME here) become guest files under ``guest_home``, and every mention of ``staging`` in
    argv, environment and those files is rewritten. Returns the invocation and the files."""
    old = str(staging)

    def move(text: str) -> str:
        return text.replace(old, guest_home)

    files = {move(str(p)): move(p.read_text()) for p in sorted(staging.rglob("*")) if p.is_file()}
    moved = Invocation([move(a) for a in inv.argv], {k: move(v) for k, v in inv.env.items()},
                       inv.cwd, inv.text_output)  # fmt: skip
    return moved, files
