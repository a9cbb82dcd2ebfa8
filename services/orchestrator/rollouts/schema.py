"""The rollout API's request and response models (pydantic v2 at the boundary)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.contracts.orchestrator import TaskSpec, http_url

Effort = Literal["low", "medium", "high", "max"]
#: Completion tokens a whole trajectory may spend per effort level (over it: cut, reward -1).
DEFAULT_EFFORT_BUDGETS: dict[str, int] = {"low": 2048, "medium": 8192, "high": 32768, "max": 131072}
MAX_SAMPLES = 4096


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class PolicyVersion(_Strict):
    """An OpenAI-compatible endpoint serving ``/v1/completions`` (token-id prompts, ``logprobs``,
    ``return_token_ids``) and ``/v1/tokenize``, tagged with the policy version it serves."""

    base_url: str | None = Field(
        None, max_length=2048, description="Default: the model service's /v1."
    )
    model: str | None = Field(None, max_length=256)
    version: str = Field(min_length=1, max_length=128, description="The policy version tag.")
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    tool_choice: Literal["auto", "required"] | None = Field(
        None,
        description="Sent with the tools on each completion: 'required' makes every turn a "
        "tool call, decoded under the model service's tool grammar (default: free decoding).",
    )

    _base_url = field_validator("base_url")(http_url)


class RolloutBudgets(_Strict):
    max_steps: int = Field(16, ge=1, le=10_000, description="Model calls per sample.")
    max_output_tokens: int = Field(512, ge=1, le=1_000_000, description="Per model call.")
    effort_budgets: dict[Effort, int] = Field(
        default_factory=lambda: dict(DEFAULT_EFFORT_BUDGETS),
        description="Completion tokens per trajectory, by effort level.",
    )

    @model_validator(mode="after")
    def _positive(self) -> RolloutBudgets:
        for effort, n in self.effort_budgets.items():
            if not 1 <= n <= 10_000_000:
                raise ValueError(f"effort_budgets.{effort}: {n} is outside 1..10000000")
        return self


class RolloutCreate(_Strict):
    tasks: list[TaskSpec] = Field(min_length=1, max_length=1024)
    samples_per_task: int = Field(1, ge=1, le=256, description="K: samples of each task.")
    harness: str = Field("codex", max_length=128)
    policy: PolicyVersion
    lam: float = Field(
        1.0, gt=0.0, le=1.0,
        description="λ: once this fraction of the live samples has finished, the rest pause.",
    )  # fmt: skip
    budgets: RolloutBudgets = Field(default_factory=RolloutBudgets)
    effort: Effort = "medium"

    @model_validator(mode="after")
    def _size(self) -> RolloutCreate:
        n = len(self.tasks) * self.samples_per_task
        if n > MAX_SAMPLES:
            raise ValueError(f"{n} samples (tasks x samples_per_task) exceed {MAX_SAMPLES}")
        return self


class RolloutIterate(_Strict):
    """The next iteration: a new policy version; paused samples resume first under it."""

    policy: PolicyVersion
    lam: float | None = Field(None, gt=0.0, le=1.0, description="Default: the batch's λ.")


class VersionSpan(BaseModel):
    version: str
    start: int = Field(description="Index of the first completion token (over the sample).")
    end: int = Field(description="One past the last.")


class SampleView(BaseModel):
    id: str
    task_index: int
    k: int
    phase: str
    status: str
    iteration: int
    steps: int
    reward: float | None
    completion_tokens: int
    exit_reason: str | None
    versions: list[VersionSpan]
    error: str | None = None


class RolloutView(BaseModel):
    id: str
    iteration: int
    policy: PolicyVersion
    lam: float
    pause_iteration: int
    counts: dict[str, int]
    samples: list[SampleView]
