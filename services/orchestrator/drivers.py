"""The composition root of episode drivers: every driver the orchestrator runs, by the name
stored with its episode or sample (``episode/driver.py``). The episode core registers only
its own white-box loop; the installed agent and the rollout sample are added here, so the
core never imports them."""

from __future__ import annotations

from services.orchestrator.episode.driver import DriverRegistry
from services.orchestrator.episode.runner import core_drivers
from services.orchestrator.installed.episode import InstalledDriver
from services.orchestrator.rollouts.sample import SampleDriver


def all_drivers() -> DriverRegistry:
    """The white-box loop (harness kind ``white-box``), the installed agent (``installed``)
    and the rollout sample (picked by its rollout, not by a harness kind)."""
    registry = core_drivers()
    registry.register(InstalledDriver.name, InstalledDriver, ("installed",))
    registry.register(SampleDriver.name, SampleDriver)
    return registry


DRIVERS = all_drivers()
