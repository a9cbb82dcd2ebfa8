"""The scenario contract: ``build(seed)`` makes a concrete instance; its oracle proves it.

Library scenarios are :class:`SpecScenario` s: a :class:`~services.tools.scenarios.dsl.
ScenarioSpec` (YAML under ``library/``) compiled per seed by the DSL, so every seed is a new
instance with the same structure. A Python scenario subclasses :class:`Scenario` directly.
The oracle (``scenarios.oracle.run_oracle``) solves any instance through any driver
(in-process or HTTP) and returns the concrete tool-call plan it executed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from services.tools.events.spec import ScenarioInstance

if TYPE_CHECKING:
    from services.tools.scenarios.dsl import ScenarioSpec


class Scenario(ABC):
    name: ClassVar[str]
    title: ClassVar[str]
    domain: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def build(self, seed: int) -> ScenarioInstance:
        """The instance for ``seed``: same seed, same instance, always."""


class SpecScenario(Scenario):
    """A scenario written in the DSL (see ``dsl.py``)."""

    def __init__(self, spec: ScenarioSpec) -> None:
        self.spec = spec
        self.name = spec.name  # type: ignore[misc]
        self.title = spec.title  # type: ignore[misc]
        self.domain = spec.domain  # type: ignore[misc]
        self.description = spec.description  # type: ignore[misc]

    def build(self, seed: int) -> ScenarioInstance:
        from services.tools.scenarios.compiler import compile_spec

        return compile_spec(self.spec, seed)
