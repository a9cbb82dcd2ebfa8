"""The scenario library: multi-day personal-assistant tasks with events and checks.

See ``README.md`` beside this file for the format. ``get_scenario(name)`` returns one;
``SCENARIOS`` lists them all.
"""

from __future__ import annotations

from services.tools.scenarios.base import Scenario
from services.tools.scenarios.library import ALL

SCENARIOS: dict[str, Scenario] = {s.name: s for s in ALL}


def get_scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; choose one of {sorted(SCENARIOS)}")
    return SCENARIOS[name]
