"""Running the installed CLIs headless through the recording gateway, for the tests.

``structure`` keeps only the shape of a request (fields, tool types and names, schema property
names), every other string replaced: that is what a committed fixture may hold, never a vendor's
prompt or tool-description text.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.orchestrator.gateway import Route, Routes, gateway_app
from services.orchestrator.installed.catalog import AGENTS
from services.orchestrator.installed.launch import Endpoint, MCPServer, invocation
from tests.model.conftest import model_settings, running

TEXT = "<text>"
# big enough for the CLIs' first prompts (20K and 15K tokens on this tokenizer)
LONG_CONTEXT = {"max_model_len": 32768, "max_pool_tokens": 65536, "max_num_batched_tokens": 2048}


@dataclass
class Stack:
    model_url: str
    gateway_url: str
    routes: Routes


@contextmanager
def stack() -> Iterator[Stack]:
    from services.model.app import create_app

    routes = Routes()
    with running(create_app(model_settings(**LONG_CONTEXT))) as model:
        with running(gateway_app(routes)) as gateway:
            yield Stack(model.url, gateway.url, routes)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    steps: list[dict[str, Any]]


def run_cli(
    s: Stack,
    preset: str,
    home: Path,
    prompt: str = "hi",
    max_output_tokens: int = 8,
    timeout_s: float = 240,
    mcp: list[MCPServer] | None = None,
    kill_after_first_step: bool = False,
) -> Run:
    """One headless invocation of the installed ``preset`` against the tiny model, recorded."""
    episode = uuid.uuid4().hex[:12]
    steps: list[dict[str, Any]] = []
    agent = AGENTS[preset]
    s.routes.add(
        episode,
        Route(f"{s.model_url}/v1", None, steps.append, max_output_tokens,
              agent=f"{agent.package}@{agent.version}"),
    )  # fmt: skip
    endpoint = Endpoint(f"{s.gateway_url}/episodes/{episode}", "episode-token", "k3-tiny")
    cwd = home / "work"
    cwd.mkdir(parents=True, exist_ok=True)
    session = str(uuid.uuid4()) if agent.session is None else None  # the episode's own id
    max_turns = 1 if preset != "codex-cli" else None
    inv = invocation(agent, endpoint, home, cwd, prompt, session, mcp=mcp, max_turns=max_turns)
    proc = subprocess.Popen(
        inv.argv, env=inv.env, cwd=inv.cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        s.routes.remove(episode)
    return Run(proc.returncode, out, err, steps)


def structure(value: Any, key: str | None = None) -> Any:
    """``value`` with every string replaced but types, roles, names and schema keys."""
    if isinstance(value, dict):
        return {k: structure(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [structure(v, key) for v in value]
    if isinstance(value, str) and key in ("type", "role", "syntax", "name"):
        return value
    return TEXT if isinstance(value, str) else value


def shape(body: dict[str, Any]) -> dict[str, Any]:
    """What the fixture pins of a first request: its fields and its tools."""
    tools = []
    for t in body.get("tools") or []:
        schema = t.get("input_schema") or t.get("parameters") or {}
        tools.append(
            {
                "type": t.get("type"),
                "name": t.get("name"),
                "properties": sorted(
                    (schema.get("properties") or {}) if isinstance(schema, dict) else {}
                ),
                "format": (t.get("format") or {}).get("syntax")
                if isinstance(t.get("format"), dict)
                else None,
            }
        )
    return {"fields": sorted(body), "tools": tools}
