"""What a scenario declares: effects, triggers, checks and events, as plain pydantic data.

The models are the tools service's public contract (``shared.contracts.tools``): a scenario
instance can be printed (``GET /scenarios/{name}?seed=``), stored inside a world
(``tools_events.spec``) and handed to the verifier. Behaviour lives in registries keyed by
name (``events.registry``), so adding an app adds names, not new event kinds.
"""

from __future__ import annotations

from shared.contracts.tools import Check, Effect, EventSpec, Person, ScenarioInstance, Trigger

__all__ = ["Check", "Effect", "EventSpec", "Person", "ScenarioInstance", "Trigger"]
