"""The scenario contract: ``build(seed)`` makes a concrete instance, ``solve`` is its oracle.

A scenario is a Python class (readable as a story: people, setup, then one ``EventSpec`` per
thing that happens) built from a seeded :class:`~services.tools.scenarios.generator.Gen`, so
every seed is a new instance with the same structure. ``solve(inst, api)`` is the scripted
expert: it works only through the apps' HTTP APIs and the world clock, like an agent would,
and proves every check satisfiable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from services.tools.events.spec import ScenarioInstance

if TYPE_CHECKING:
    from services.tools.scenarios.api import WorldAPI


class Scenario(ABC):
    name: ClassVar[str]
    title: ClassVar[str]
    domain: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def build(self, seed: int) -> ScenarioInstance:
        """The instance for ``seed``: same seed, same instance, always."""

    def solve(self, inst: ScenarioInstance, api: WorldAPI) -> None:
        """Oracle solver: act through ``api`` until ``inst.end``. The default replays the
        instance's per-event steps as each event fires (``story.run_oracle``)."""
        from services.tools.scenarios.story import run_oracle

        run_oracle(inst.oracle, inst.end, api)
