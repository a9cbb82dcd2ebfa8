"""A submission session: the budget, the penalties, and the line between public and hidden.

The state (a pydantic model the API stores in SQL) holds the hidden seed; nothing this module
returns to the agent carries it or any hidden case. Every call of the public verifier is a
submission; those beyond ``free_submissions`` cost ``penalty_per_extra`` each off the final
reward, and none are accepted past ``max_submissions``. ``finalize`` runs the hidden verifier
once on the chosen submission: reward = max(0, hidden score - penalty).
"""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import BaseModel, Field

from services.verifier.submission.tasks import TASKS, BadSubmission, Feedback


class UnknownSubmissionTask(LookupError):
    pass


class BudgetExhausted(RuntimeError):
    """More submissions than the task allows: a 4xx (409)."""


class SessionClosed(RuntimeError):
    """The session was finalized: a 4xx (409)."""


class SessionState(BaseModel):
    """Server-side only: ``hidden_seed`` must never be serialised to the agent."""

    task: str
    public_seed: int
    hidden_seed: int
    submissions: list[dict[str, Any]] = Field(default_factory=list)
    final: dict[str, Any] | None = None


class Budget(BaseModel):
    used: int
    free: int
    max: int
    penalty_per_extra: float
    penalty_so_far: float


class PublicView(BaseModel):
    """What the agent may see of a session."""

    task: str
    brief: dict[str, Any]
    budget: Budget
    final: dict[str, Any] | None = None


class SubmitResult(BaseModel):
    submission: int
    feedback: Feedback
    budget: Budget


class FinalResult(BaseModel):
    hidden_score: float = Field(
        description="Share of hidden cases passed (or relative score); the cases stay hidden."
    )
    submissions_used: int
    penalty: float
    reward: float


def _task(name: str) -> Any:
    if name not in TASKS:
        raise UnknownSubmissionTask(
            f"no submission task {name!r} (known: {', '.join(sorted(TASKS))})"
        )
    return TASKS[name]


def new_session(task_name: str) -> SessionState:
    _task(task_name)
    return SessionState(
        task=task_name, public_seed=secrets.randbits(48), hidden_seed=secrets.randbits(48)
    )


def budget(state: SessionState) -> Budget:
    t = _task(state.task)
    used = len(state.submissions)
    return Budget(
        used=used, free=t.free_submissions, max=t.max_submissions, penalty_per_extra=t.penalty_per_extra,
        penalty_so_far=round(max(0, used - t.free_submissions) * t.penalty_per_extra, 10),
    )  # fmt: skip


def view(state: SessionState) -> PublicView:
    return PublicView(
        task=state.task,
        brief=_task(state.task).brief(state.public_seed, state.hidden_seed),
        budget=budget(state),
        final=state.final,
    )


def submit(state: SessionState, submission: dict[str, Any]) -> SubmitResult:
    """The public verifier: diagnostics on public cases; counts against the budget (a malformed
    submission is refused before it counts)."""
    t = _task(state.task)
    if state.final is not None:
        raise SessionClosed("the session is finalized")
    if len(state.submissions) >= t.max_submissions:
        raise BudgetExhausted(f"the budget of {t.max_submissions} submissions is spent")
    feedback = t.public_check(state.public_seed, state.hidden_seed, submission)
    state.submissions.append(submission)
    return SubmitResult(submission=len(state.submissions), feedback=feedback, budget=budget(state))


def finalize(state: SessionState, submission: dict[str, Any] | None = None) -> FinalResult:
    """The hidden verifier, once: on ``submission`` or else the last one submitted."""
    t = _task(state.task)
    if state.final is not None:
        raise SessionClosed("the session is finalized")
    chosen = (
        submission
        if submission is not None
        else (state.submissions[-1] if state.submissions else None)
    )
    if chosen is None:
        raise BadSubmission("nothing to finalize: submit once or pass a submission")
    score = t.hidden_score(state.public_seed, state.hidden_seed, chosen)
    b = budget(state)
    result = FinalResult(
        hidden_score=score,
        submissions_used=b.used,
        penalty=b.penalty_so_far,
        reward=max(0.0, score - b.penalty_so_far),
    )
    state.final = result.model_dump()
    return result
