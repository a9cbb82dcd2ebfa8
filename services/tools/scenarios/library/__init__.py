"""Every scenario of the library, one module each."""

from __future__ import annotations

from services.tools.scenarios.base import Scenario
from services.tools.scenarios.library.empty import EmptyScenario

ALL: list[Scenario] = [EmptyScenario()]
