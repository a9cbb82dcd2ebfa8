"""The pinned agent CLIs and where ``scripts/setup_agents.sh`` put them.

One place names each agent's npm package and version (the setup script's list must match it, a
test checks), so ``k3stack harness list`` can say whether it is installed and an episode can find
its binary without a network or a global npm install.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Agent:
    name: str  # the cache folder's stem: <name>-<version>
    package: str
    version: str
    binary: str  # the command npm links under node_modules/.bin
    preset: str  # the harness preset that runs it

    def prefix(self, root: Path | None = None) -> Path:
        return (root or agents_dir()) / f"{self.name}-{self.version}"

    def binary_path(self, root: Path | None = None) -> Path:
        return self.prefix(root) / "node_modules" / ".bin" / self.binary

    def installed(self, root: Path | None = None) -> bool:
        stamp = self.prefix(root) / ".installed"
        return stamp.is_file() and os.access(self.binary_path(root), os.X_OK)


AGENTS: dict[str, Agent] = {
    a.preset: a
    for a in (
        Agent("claude-code", "@anthropic-ai/claude-code", "2.1.332", "claude", "claude-code-cli"),
        Agent("codex", "@openai/codex", "0.171.0", "codex", "codex-cli"),
    )
}


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
