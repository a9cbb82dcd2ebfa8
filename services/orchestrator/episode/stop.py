"""How a run ended: one closed set for every driver (the white-box loop, an installed agent's
days, a rollout sample), each outcome mapped once, here, to the job status it ends in, whether
the world is scored, and the shared trajectory's exit status.

A budget running out is a run that went to its end (scored, ``succeeded``); an installed CLI
killed at the episode's wall budget (``agent_timeout``) is such a budget too. A policy that
keeps failing, an agent process that dies or ends its day without ending its turn is a
``failed`` job, still scored (the world holds what the agent did), with the outcome as its error
code; so is a CLI that came up without the world's MCP tools (``agent_no_tools``: its "done"
is an infrastructure failure, not the agent's). A run that failed is never ``succeeded``. A cancel is ``cancelled`` and not scored.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, NamedTuple

JobStatus = Literal["succeeded", "failed", "cancelled"]
TrajectoryExit = Literal["completed", "max_steps", "max_tokens", "timeout", "cancelled", "error"]


class _Ends(NamedTuple):
    job_status: JobStatus
    scored: bool
    trajectory_exit: TrajectoryExit


class Outcome(StrEnum):
    # the white-box loop
    completed = "completed"  # the agent said it was done (no world)
    scenario_end = "scenario_end"  # the world's clock reached the scenario's end
    max_steps = "max_steps"
    max_tokens = "max_tokens"
    max_wall_s = "max_wall_s"
    policy_error = "policy_error"  # the policy failed MAX_POLICY_FAILURES times in a row
    # an installed agent's day (issue 21's harnesses)
    agent_timeout = "agent_timeout"  # the CLI was still at it when the wall budget ran out
    agent_crashed = "agent_crashed"  # killed by a signal
    agent_garbage = "agent_garbage"  # its stdout was not its JSON lines
    agent_failed = "agent_failed"  # exited without ending its turn
    agent_no_tools = "agent_no_tools"  # its first model request offered none of the world's tools
    # a rollout sample
    effort_budget = "effort_budget"  # over its effort level's completion tokens: cut, reward -1
    # any driver
    cancelled = "cancelled"

    @property
    def job_status(self) -> JobStatus:
        """The job status a run that ended this way ends in."""
        return ENDS[self].job_status

    @property
    def scored(self) -> bool:
        """Whether the world is scored (the reward recorded) for a run that ended this way."""
        return ENDS[self].scored

    @property
    def failed(self) -> bool:
        return self.job_status == "failed"

    @property
    def budget_exhausted(self) -> bool:
        return self in (
            Outcome.max_steps, Outcome.max_tokens, Outcome.max_wall_s, Outcome.agent_timeout,
            Outcome.effort_budget,
        )  # fmt: skip

    @property
    def trajectory_exit(self) -> TrajectoryExit:
        """The shared trajectory's exit status (``shared.trajectory.ExitStatus``)."""
        return ENDS[self].trajectory_exit

    @classmethod
    def of(cls, value: str | None) -> Outcome:
        """The outcome a stored exit reason names (none recorded: ``completed``)."""
        return cls(value or cls.completed)


ENDS: dict[Outcome, _Ends] = {
    Outcome.completed: _Ends("succeeded", True, "completed"),
    Outcome.scenario_end: _Ends("succeeded", True, "completed"),
    Outcome.max_steps: _Ends("succeeded", True, "max_steps"),
    Outcome.max_tokens: _Ends("succeeded", True, "max_tokens"),
    Outcome.max_wall_s: _Ends("succeeded", True, "timeout"),
    Outcome.policy_error: _Ends("failed", True, "error"),
    Outcome.agent_timeout: _Ends("succeeded", True, "timeout"),
    Outcome.agent_crashed: _Ends("failed", True, "error"),
    Outcome.agent_garbage: _Ends("failed", True, "error"),
    Outcome.agent_failed: _Ends("failed", True, "error"),
    Outcome.agent_no_tools: _Ends("failed", True, "error"),
    Outcome.effort_budget: _Ends("succeeded", True, "max_tokens"),
    Outcome.cancelled: _Ends("cancelled", False, "cancelled"),
}
