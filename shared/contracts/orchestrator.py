"""Wire models of the orchestrator service's answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_MEMORY_CHARS = 1_000_000  # one memory file; the harness shows at most memory_max_chars

__all__ = [
    "BudgetOverrides",
    "Episode",
    "EpisodeCreate",
    "EpisodeList",
    "EventResult",
    "PlatformStatus",
    "PolicySpec",
    "ServiceStatus",
    "TaskSpec",
]


class ServiceStatus(BaseModel):
    service: str
    url: str
    healthy: bool
    detail: dict[str, Any] | str


class PlatformStatus(BaseModel):
    healthy: bool
    services: list[ServiceStatus]


# --- episodes ------------------------------------------------------------------------------


MAX_WALL_S = 6 * 24 * 3600  # an installed agent's sandbox lives this + 10 min (at most 7 days)
MAX_TOKENS = 10**10


class _Strict(BaseModel):
    """Unknown fields, Infinity and NaN are refused (a budget of Infinity never ends)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TaskSpec(_Strict):
    scenario: str | None = Field(None, min_length=1, max_length=128)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    instruction: str | None = Field(None, min_length=1, max_length=100_000)
    sandbox_template: str | None = Field(
        None, min_length=1, max_length=128, description="Sandbox for shell/file tools."
    )

    @model_validator(mode="after")
    def _some(self) -> TaskSpec:
        if self.scenario is None and self.instruction is None:
            raise ValueError("give a scenario, an instruction, or both")
        return self


class PolicySpec(_Strict):
    kind: Literal["oracle", "openai"] = "openai"
    base_url: str | None = Field(
        None, description="OpenAI-compatible base URL (…/v1); default: the model service."
    )
    api_key: str | None = None
    model: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1, description="A 64-bit integer.")
    tool_choice: Literal["auto", "required", "none"] | None = Field(
        None, description="Sent as is (required: every turn calls a tool)."
    )
    reasoning_effort: Literal["none", "low", "medium", "high"] | None = Field(
        None, description="Overrides the harness's (none: the model's instruct mode)."
    )
    timeout_s: float = Field(600.0, gt=0, le=3600, description="One model request's timeout.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        return http_url(v)


def http_url(v: str | None) -> str | None:
    """``v`` when it is an http(s) URL with a host (a policy endpoint's base URL)."""
    if v is None:
        return v
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL with a host: {v[:200]!r}")
    return v


class BudgetOverrides(_Strict):
    max_steps: int | None = Field(None, ge=1, le=100_000)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_wall_s: float | None = Field(None, gt=0, le=MAX_WALL_S)
    steps_per_day: int | None = Field(None, ge=1, le=100_000)
    max_output_tokens: int | None = Field(None, ge=1, le=10_000_000)
    tool_timeout_s: float | None = Field(None, gt=0, le=MAX_WALL_S)


class EpisodeCreate(_Strict):
    task: TaskSpec
    harness: str = Field("claude-code", min_length=1, max_length=64)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    budgets: BudgetOverrides = Field(default_factory=BudgetOverrides)
    context_window: int | None = Field(
        None,
        ge=256,
        le=MAX_TOKENS,
        description="Override the context window (default: the model's).",
    )
    context_headroom: int | None = Field(
        None, ge=1, le=MAX_TOKENS,
        description="Hold the window just large enough that compaction fires this many tokens "
        "above the fixed context (system prompt, task and tool schemas, as counted); never "
        "larger than the window otherwise used. For short episodes that compact (the demo).",
    )  # fmt: skip
    memory: dict[str, str] = Field(
        default_factory=dict, max_length=64,
        description=f"Memory files by name (each at most {MAX_MEMORY_CHARS:,} characters).",
    )  # fmt: skip
    keep_world: bool = Field(False, description="Keep the world after the episode (inspection).")

    @field_validator("memory")
    @classmethod
    def _memory_sizes(cls, v: dict[str, str]) -> dict[str, str]:
        for name, text in v.items():
            if not 1 <= len(name) <= 255 or "/" in name:
                raise ValueError(f"memory file name {name[:80]!r}: 1-255 characters, no '/'")
            if len(text) > MAX_MEMORY_CHARS:
                raise ValueError(
                    f"memory file {name!r} has {len(text):,} characters; "
                    f"at most {MAX_MEMORY_CHARS:,}"
                )
        return v

    @model_validator(mode="after")
    def _oracle_needs_scenario(self) -> EpisodeCreate:
        if self.policy.kind == "oracle" and self.task.scenario is None:
            raise ValueError("policy.kind oracle needs task.scenario")
        return self


Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class EventResult(BaseModel):
    event_id: str
    title: str | None = None
    status: str
    passed: bool
    checks: list[dict[str, Any]] = Field(default_factory=list)


class Episode(BaseModel):
    id: str
    status: Status
    harness: str
    policy: str
    scenario: str | None
    seed: int
    created_at: datetime
    updated_at: datetime
    step: int
    tokens: int
    compactions: int
    simulated_day: int
    world_clock: str | None
    reward: float | None
    events_passed: int | None
    events_total: int | None
    results: list[EventResult] = Field(default_factory=list)
    exit_reason: str | None
    exit_detail: str | None = Field(
        None, description="Why the loop stopped there, e.g. the policy's last error."
    )
    error_code: str | None = None
    error_message: str | None = None
    cancel_requested: bool = False
    sandbox_id: str | None = None
    world_id: str | None = None
    attempts: int = 0


class EpisodeList(BaseModel):
    episodes: list[Episode]


class HarnessFidelity(BaseModel):
    """An episode's harness fingerprint, row name -> value (``k3stack harness compare``)."""

    rows: dict[str, str | int | float]
