"""Every way a run ends is one member of a closed set, mapped once to its job status, its
scoring and its trajectory exit; a failed one is never ``succeeded``; a stored outcome of any
driver (an installed CLI's ``agent_timeout`` included) exports instead of raising."""

from __future__ import annotations

import pytest

from services.orchestrator.episode.export import to_shared
from services.orchestrator.episode.stop import ENDS, Outcome


def test_every_outcome_is_mapped_once() -> None:
    assert set(ENDS) == set(Outcome)
    assert {o.job_status for o in Outcome} == {"succeeded", "failed", "cancelled"}
    for o in Outcome:
        assert o.trajectory_exit in ("completed", "max_steps", "max_tokens", "timeout",
                                     "cancelled", "error")  # fmt: skip
        if o.failed:
            assert o.trajectory_exit == "error", o
    assert Outcome.agent_timeout.scored and Outcome.agent_timeout.job_status == "succeeded"
    assert Outcome.policy_error.failed and Outcome.agent_crashed.failed
    assert not Outcome.cancelled.scored


@pytest.mark.parametrize("reason", [o.value for o in Outcome if o.job_status == "succeeded"])
def test_a_finished_episode_exports_its_outcome(reason: str) -> None:
    doc = {"episode_id": "ep_x", "status": "succeeded", "items": [], "reward": 0.5,
           "result": {"exit_reason": reason}}  # fmt: skip
    traj = to_shared(doc)
    assert traj.exit.status == Outcome(reason).trajectory_exit
    assert traj.exit.reason == reason
