"""Why an episode stopped: a closed set, each reason with the job status it ends in.

A budget running out is an episode that ran to its end (scored, ``succeeded``); a policy
that keeps failing or an agent process that dies is a ``failed`` job, still scored, with the
reason as its error code; a cancel is ``cancelled``.
"""

from __future__ import annotations

from enum import StrEnum


class StopReason(StrEnum):
    completed = "completed"  # the agent said it was done (no world)
    scenario_end = "scenario_end"  # the world's clock reached the scenario's end
    max_steps = "max_steps"
    max_tokens = "max_tokens"
    max_wall_s = "max_wall_s"
    policy_error = "policy_error"  # the policy failed MAX_POLICY_FAILURES times in a row
    agent_crashed = "agent_crashed"  # an installed agent's process died (issue 21's harnesses)
    cancelled = "cancelled"

    @property
    def job_status(self) -> str:
        """The job status an episode stopped for this reason ends in."""
        if self in (StopReason.policy_error, StopReason.agent_crashed):
            return "failed"
        if self is StopReason.cancelled:
            return "cancelled"
        return "succeeded"

    @property
    def budget_exhausted(self) -> bool:
        return self in (StopReason.max_steps, StopReason.max_tokens, StopReason.max_wall_s)

    @property
    def trajectory_exit(self) -> str:
        """The shared trajectory's exit status (``shared.trajectory.ExitStatus``)."""
        return {
            StopReason.scenario_end: "completed",
            StopReason.max_wall_s: "timeout",
            StopReason.policy_error: "error",
            StopReason.agent_crashed: "error",
        }.get(self, self.value)
