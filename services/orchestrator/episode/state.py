"""The episode's loop state, typed.

One model for everything a loop carries between ticks (the white-box loop, a rollout sample,
an installed agent's days): every field is declared, so a misspelt or ad-hoc key is an error
(``extra="forbid"``) instead of a silent new key. The context (``messages``) and the scenario
instance are part of it while the episode runs, but the journal stores them as trajectory
items, not in the state's records (:mod:`services.orchestrator.episode.journal`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Phase = Literal["loop", "scoring", "done"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Usage(_Strict):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class WorldLease(_Strict):
    """The episode's world in the tools service and the token its tools act with."""

    id: str
    token: str


class ClockTarget(_Strict):
    """Where the end of a turn moves the world clock: decided (and persisted) in one tick,
    carried out in the next, so a resumed worker moves it to the same place."""

    before: datetime
    to: datetime
    end: bool


class EpisodeState(_Strict):
    messages: list[dict[str, Any]] = Field(default_factory=list)  # the context the model sees
    step: int = 0  # model calls made
    day: int = 1  # the simulated day
    day_steps: int = 0  # model calls since the clock last moved
    pending: list[dict[str, Any]] = Field(default_factory=list)  # the turn's {id, name, arguments}
    pending_index: int = 0  # the next of them to run
    pending_step: int = 0  # the step that asked for them (their idempotency keys)
    turn_ended: bool = False  # the agent is done for now: the clock moves next
    wake_at: str | None = None  # a scripted policy's next simulated time of interest
    clock_target: ClockTarget | None = None
    usage: Usage = Field(default_factory=Usage)
    tokens: int = 0  # the context's size at the last count
    compactions: int = 0
    compaction_failures: int = 0
    policy_failures: int = 0  # in a row
    policy_error: str | None = None
    segment: int = 0  # the context segment (one more after every compaction)
    scratch: dict[str, Any] = Field(default_factory=dict)  # the state tools' (todos, memory)
    cursor: dict[str, Any] = Field(default_factory=dict)  # the policy's own
    wall_s: float = 0.0
    exit_reason: str | None = None  # an Outcome (episode/stop.py): every driver's, one closed set
    exit_detail: str | None = None
    phase: Phase = "loop"
    clock: str | None = None  # the world clock after the last move (ISO)
    world: WorldLease | None = None
    scenario: dict[str, Any] | None = None
    sandbox_id: str | None = None
    runtime: str | None = None  # the sandbox runtime an installed agent ran in
    tools_recorded: bool = False  # the tool schemas are in the trajectory
    covered: int = 0  # a rollout sample's tokens already in its segments
    session_id: str | None = None  # an installed agent's session / thread, per episode
    thread_id: str | None = None
    days_run: int = 0

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> EpisodeState:
        """The state from its stored JSON (defaults for an episode that has none yet)."""
        return cls.model_validate(stored or {})


def initial_state(system_prompt: str, instruction: str) -> EpisodeState:
    return EpisodeState(
        messages=[
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": instruction},
        ]
    )
