"""The tools service's contract: worlds, clock, events, checks and the scenario catalogue.

The service (``services.tools``) builds its management routes on these models and the
platform's clients return them, so the field names here are the JSON the routes answer.
Scenario specs (effects, triggers, checks, events) live here too: ``GET /scenarios/{name}``
answers a :class:`ScenarioInstance`, and the verifier reads checks in this shape.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, field_validator, model_validator

MAX_ADVANCE = timedelta(days=3660)
Domain = Literal[
    "hr", "legal", "finance", "personal", "sales", "engineering", "travel", "research", "test"
]

# --- scenario specs ----------------------------------------------------------------------


class Effect(BaseModel):
    """One change an event makes to the world, e.g. ``gmail.deliver`` or ``npc.reply``."""

    op: str = Field(description="Effect name, '<app>.<verb>' (see the service's registry).")
    args: dict[str, Any] = Field(default_factory=dict)


class Trigger(BaseModel):
    """What arms a triggered event (or, as an event's ``unless``, what averts it).

    Either an action in the world's action log (``app`` + ``action``; ``actor`` is a glob:
    ``agent`` for the assistant, ``event:*`` for what events and NPCs do), or another event
    firing (``after_event``). ``where`` is matched against the action's payload: a scalar must
    be equal (strings case-insensitively), and when the payload value is a list it must
    contain the scalar. The event then fires ``delay_minutes`` after, or at ``next_morning``
    (HH:MM) of the following day when that is set.
    """

    app: str = ""
    action: str = ""
    after_event: str | None = Field(None, description="Fire after this event fired.")
    since_event: str | None = Field(
        None, description="Count only actions after this event did what it does."
    )
    where: dict[str, Any] = Field(default_factory=dict)
    actor: str = "agent"
    text_contains: list[str] = Field(
        default_factory=list, description="Words that must all appear in the payload's text."
    )
    delay_minutes: int = Field(0, ge=0)
    next_morning: str | None = Field(None, pattern=r"^\d\d:\d\d$")

    @model_validator(mode="after")
    def _source(self) -> Trigger:
        if (self.after_event is None) == (not (self.app and self.action)):
            raise ValueError("a trigger names either 'after_event' or both 'app' and 'action'")
        return self


class CheckFallback(BaseModel):
    kind: str
    args: dict[str, Any] = Field(default_factory=dict)


class Check(BaseModel):
    """A predicate over world state (``kind`` names a registered predicate), evaluated at
    ``at``. ``kind == "judge"`` declares a model-judged check: ``rubric`` plus ``inputs``
    (selectors whose resolved content the verifier's judge reads)."""

    id: str
    kind: str
    args: dict[str, Any] = Field(default_factory=dict)
    at: datetime | None = Field(None, description="Simulated time of evaluation; None = at end.")
    description: str = ""
    rubric: str | None = None
    inputs: list[dict[str, Any]] = Field(default_factory=list)
    fallback: CheckFallback | None = Field(
        None,
        description="For judge checks: the deterministic predicate that decides the verdict "
        "when no judge model has (tests, offline runs); the verifier may override it.",
    )


class EventSpec(BaseModel):
    """One event of a scenario: when it happens, what it does, and how the agent is judged."""

    id: str
    title: str
    at: datetime | None = Field(None, description="Scheduled time; None when triggered.")
    trigger: Trigger | None = None
    unless: Trigger | None = Field(
        None,
        description="A scheduled event is averted when a matching action lands before it "
        'is due ("no answer by Tuesday 17:00 -> the manager escalates").',
    )
    effects: list[Effect] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    depends_on: list[str] = Field(
        default_factory=list, description="Events this one follows from (the event graph)."
    )
    tags: list[str] = Field(
        default_factory=list,
        description="What the event exercises: branching, late-info, moving-deadline, "
        "conflict, escalation, negative, judge, ...",
    )

    @model_validator(mode="after")
    def _when(self) -> EventSpec:
        if (self.at is None) == (self.trigger is None):
            raise ValueError(f"event {self.id}: give exactly one of 'at' and 'trigger'")
        if self.unless is not None and self.at is None:
            raise ValueError(f"event {self.id}: only a scheduled event can be averted")
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
    domain: Domain
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
        "(never stored in a world).",
    )

    @property
    def apps(self) -> set[str]:
        ops = [e.op for e in self.setup] + [f.op for ev in self.events for f in ev.effects]
        kinds = [c.kind for ev in self.events for c in ev.checks]
        return {
            o.split(".")[0]
            for o in ops + kinds
            if o.split(".")[0] not in ("npc", "world", "judge", "say")
        }


# --- worlds --------------------------------------------------------------------------------


class WorldCreate(BaseModel):
    scenario: str = Field("empty", min_length=1, max_length=128)
    seed: int = Field(0, ge=0, le=2**31 - 1)


class World(BaseModel):
    id: str
    scenario: str
    seed: int
    created_at: datetime
    clock: datetime
    parent_id: str | None = None
    token: str | None = Field(None, description="World token; returned once, at creation/fork.")


class Snapshot(BaseModel):
    id: str
    world_id: str
    created_at: datetime
    clock: datetime
    label: str | None
    state_hash: str = Field(description="full_hash of the world when the snapshot was taken")
    size: int


class SnapshotCreate(BaseModel):
    label: str | None = Field(None, max_length=128)


class RestoreBody(BaseModel):
    snapshot_id: str = Field(min_length=1, max_length=64)


class WorldState(BaseModel):
    """What a verifier diffs: each app's own export, raw rows per table, and the hashes."""

    world_id: str
    scenario: str
    seed: int
    clock: str
    state_hash: str = Field(description="Digest of the apps' rows (what an agent changes).")
    full_hash: str = Field(description="Digest of everything: clock, events, checks, log.")
    apps: dict[str, Any] = Field(description="Per app, that app's own export of its state.")
    tables: dict[str, list[dict[str, Any]]] | None = Field(
        None, description="Raw rows per table (absent when asked for without tables)."
    )


# --- clock ---------------------------------------------------------------------------------


class Clock(BaseModel):
    world_id: str
    now: datetime


_SHORT = re.compile(r"^(\d{1,7})\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_ISO_DURATION = TypeAdapter(timedelta)


def parse_duration(value: str | float | int) -> timedelta:
    """Seconds (number), ``90m`` / ``3h`` / ``2d`` / ``1w``, or ISO 8601 ``P1DT2H`` (parsed by
    pydantic); never negative, at most :data:`MAX_ADVANCE`."""
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, int | float):
        out = timedelta(seconds=value) if abs(value) < 1e12 else MAX_ADVANCE * 2
    elif m := _SHORT.match(value.strip()):
        out = timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    elif value.strip().upper().startswith("P"):
        try:
            out = _ISO_DURATION.validate_python(value.strip().upper())
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 duration like 'P1DT2H'") from None
    else:
        raise ValueError("use seconds, '90m', '3h', '2d', '1w' or ISO 8601 like 'P1DT2H'")
    if out < timedelta(0) or out > MAX_ADVANCE:
        raise ValueError("out of range: 0 to 3660 days")
    return out


class AdvanceBody(BaseModel):
    to: datetime | None = Field(None, description="Absolute simulated time (ISO 8601).")
    by: str | float | None = Field(
        None, description="Relative: seconds, '90m', '3h', '2d', or ISO 8601 'PT2H'."
    )

    @field_validator("by")
    @classmethod
    def _by(cls, v: str | float | None) -> str | float | None:
        if v is not None:
            parse_duration(v)
        return v

    @model_validator(mode="after")
    def _one(self) -> AdvanceBody:
        if (self.to is None) == (self.by is None):
            raise ValueError("give exactly one of 'to' and 'by'")
        return self


class AdvanceResult(BaseModel):
    """The clock after an advance, the events that fired (in order) and how many checks froze."""

    world_id: str
    now: datetime
    fired: list[str]
    checks_evaluated: int


# --- events --------------------------------------------------------------------------------

EventStatus = Literal["waiting", "due", "fired", "failed", "averted"]


class EventInfo(BaseModel):
    event_id: str
    title: str | None
    status: EventStatus
    due_at: datetime | None
    fired_at: datetime | None
    trigger: dict[str, Any] | None = Field(description="The trigger as declared, if any.")
    error: str | None = Field(description="Why the event failed, when it did.")


class EventList(BaseModel):
    events: list[EventInfo]


# --- checks --------------------------------------------------------------------------------


class CheckResult(BaseModel):
    id: str
    kind: str
    passed: bool
    final: bool = Field(description="Frozen at its time (true) or evaluated live (false).")
    evaluated_at: datetime
    description: str
    detail: dict[str, Any]


class EventVerdict(BaseModel):
    event_id: str
    title: str
    status: EventStatus
    due_at: datetime | None
    passed: bool = Field(
        description="Fired (or averted, for an event the agent should prevent) and every "
        "deterministic check passed."
    )
    checks: list[CheckResult]


class JudgeInput(BaseModel):
    selector: dict[str, Any]
    items: list[dict[str, Any]]


class JudgeCheck(BaseModel):
    """A model-judged check: the verifier's judge reads ``rubric`` against ``inputs``."""

    event_id: str
    check_id: str
    rubric: str | None
    description: str
    inputs: list[JudgeInput]


class ChecksReport(BaseModel):
    world_id: str
    clock: datetime
    events_total: int
    events_passed: int
    checks_total: int
    checks_passed: int
    events: list[EventVerdict]
    judge_checks: list[JudgeCheck]


# --- scenarios -----------------------------------------------------------------------------


class ScenarioSummary(BaseModel):
    name: str
    title: str
    domain: Domain
    description: str


class ScenarioList(BaseModel):
    scenarios: list[ScenarioSummary]


class OracleStep(BaseModel):
    """One tool call of the scenario's oracle: at simulated time ``at`` (advance the clock
    there first), call MCP tool ``tool`` with ``arguments`` (concrete ids)."""

    event_id: str = Field(description="The event this step answers.")
    at: datetime
    app: str = Field(description="The app the tool belongs to (its /worlds/{id}/mcp/{app}).")
    tool: str = Field(description="An MCP tool name of /worlds/{id}/mcp (tools/list).")
    arguments: dict[str, Any]


class OraclePlan(BaseModel):
    """The oracle as a replayable list of tool calls, for one scenario and seed: replayed
    in order against a fresh world of that scenario and seed (then advanced to ``end``), it
    passes every event."""

    scenario: str
    seed: int
    end: datetime
    steps: list[OracleStep]
