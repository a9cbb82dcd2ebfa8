"""Every scenario of the library: one YAML spec per scenario (see ``scenarios/dsl.py``), plus
the Python ``empty`` world."""

from __future__ import annotations

from pathlib import Path

from services.tools.scenarios.base import Scenario, SpecScenario
from services.tools.scenarios.dsl import ScenarioSpec
from services.tools.scenarios.library.empty import EmptyScenario

HERE = Path(__file__).parent

ALL: list[Scenario] = [
    EmptyScenario(),
    *(SpecScenario(ScenarioSpec.from_yaml(p)) for p in sorted(HERE.glob("*.yaml"))),
]
