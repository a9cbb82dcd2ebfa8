"""The installed agent CLIs: one spec file each (``agents/<name>.yaml``, see spec.py).

``scripts/setup_agents.sh`` reads the same files (``--list`` prints what it read; a test checks
it agrees with :data:`ALL`), so each pin is written once; ``k3stack harness list`` says whether
each is installed, and an episode finds its binary without a network or a global install. Two
install kinds: ``npm`` (a prefix holding ``node_modules/.bin/<binary>``; those with ``node:
pinned`` run with the pinned :data:`NODE` first on PATH) and ``pip`` (a python3.11 venv holding
``bin/<binary>``). Adding a CLI is adding a file there (docs/installed-agents.md).
"""

from __future__ import annotations

from services.orchestrator.installed.spec import NODE, AgentSpec, agents_dir, load_specs

Agent = AgentSpec

ALL: tuple[Agent, ...] = load_specs()
"""Every agent setup installs, with how it is installed, which API it speaks, its command line
and config files, and how its stdout says its turn ended and which session to resume."""

AGENTS: dict[str, Agent] = {a.preset: a for a in ALL}
"""By the harness preset that runs each."""

__all__ = ["AGENTS", "ALL", "NODE", "Agent", "NotInstalled", "agents_dir", "install_status"]


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
