"""What a scenario declares: effects, triggers, checks and events, as plain pydantic data.

Everything here is JSON-serialisable: a scenario instance can be printed (``GET
/scenarios/{name}?seed=``), stored inside a world (``tools_events.spec``) and handed to the
verifier. Behaviour lives in registries keyed by name (``effects.EFFECTS``,
``checks.PREDICATES``), so adding an app adds names, not new event kinds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator


class Effect(BaseModel):
    """One change an event makes to the world, e.g. ``gmail.deliver`` or ``npc.reply``."""

    op: str = Field(description="Effect name in events.effects.EFFECTS, '<app>.<verb>'.")
    args: dict[str, Any] = Field(default_factory=dict)


class Trigger(BaseModel):
    """Arm an event when an action matching this lands in the world's action log.

    ``where`` is matched against the action's payload: a scalar must be equal (strings
    case-insensitively), and when the payload value is a list it must contain the scalar.
    The event then fires ``delay_minutes`` after the action, or at ``next_morning`` (HH:MM)
    of the following day when that is set.
    """

    app: str
    action: str
    where: dict[str, Any] = Field(default_factory=dict)
    actor: str = "agent"
    text_contains: list[str] = Field(
        default_factory=list, description="Words that must all appear in the payload's text."
    )
    delay_minutes: int = Field(0, ge=0)
    next_morning: str | None = Field(None, pattern=r"^\d\d:\d\d$")


class Check(BaseModel):
    """A predicate over world state (``kind`` in checks.PREDICATES), evaluated at ``at``.

    ``kind == "judge"`` declares a model-judged check instead: ``rubric`` plus ``inputs``
    (predicate-style selectors whose resolved content the verifier service feeds its judge).
    """

    id: str
    kind: str
    args: dict[str, Any] = Field(default_factory=dict)
    at: datetime | None = Field(None, description="Simulated time of evaluation; None = at end.")
    description: str = ""
    rubric: str | None = None
    inputs: list[dict[str, Any]] = Field(default_factory=list)


class EventSpec(BaseModel):
    """One event of a scenario: when it happens, what it does, and how the agent is judged."""

    id: str
    title: str
    at: datetime | None = Field(None, description="Scheduled time; None when triggered.")
    trigger: Trigger | None = None
    effects: list[Effect] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)

    @model_validator(mode="after")
    def _when(self) -> EventSpec:
        if (self.at is None) == (self.trigger is None):
            raise ValueError(f"event {self.id}: give exactly one of 'at' and 'trigger'")
        return self


class Person(BaseModel):
    name: str
    email: str
    role: str = ""
    slack_id: str | None = None
    handle: str | None = None


class ScenarioInstance(BaseModel):
    """A scenario made concrete for one seed: the world's start, setup and event stream."""

    name: str
    seed: int
    title: str
    domain: Literal["hr", "legal", "finance", "personal", "test"]
    description: str
    start: datetime
    end: datetime
    user: Person
    people: list[Person] = Field(default_factory=list)
    setup: list[Effect] = Field(default_factory=list)
    events: list[EventSpec] = Field(default_factory=list)
    facts: dict[str, Any] = Field(
        default_factory=dict, description="Ground truth the oracle solver and checks share."
    )
    oracle: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict,
        description="Per event id, the steps the oracle solver takes once that event fired "
        "(never stored in a world; see scenarios.story.run_oracle).",
    )

    @property
    def apps(self) -> set[str]:
        ops = [e.op for e in self.setup] + [f.op for ev in self.events for f in ev.effects]
        kinds = [c.kind for ev in self.events for c in ev.checks]
        return {
            o.split(".")[0] for o in ops + kinds if o.split(".")[0] not in ("npc", "world", "judge")
        }
