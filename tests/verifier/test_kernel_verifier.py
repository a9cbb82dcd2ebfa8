"""Honest candidates are ordered by speed; crashes, hangs and floods get 0 and the caller lives."""

from __future__ import annotations

import pytest

from services.verifier.kernel.spec import TASKS_DIR, UnknownTask
from services.verifier.kernel.verify import BadCandidate, verify_kernel
from tests.verifier.conftest import SHORT, candidate

TIMED = {"trials": 3, "iterations": 5, "warmups": 2}


@pytest.mark.slow
def test_honest_candidates_rewarded_in_speed_order() -> None:
    """slow = 20x the reference's work, fast = 3x the expert's, expert = the expert itself:
    every one of them earns more than 0 (the floor for being right), in speed order."""
    slow, fast, expert = (
        verify_kernel("kda_step", candidate("kda_step", n), timing_overrides=TIMED)
        for n in ("slow", "fast", "expert_copy")
    )
    for r in (slow, fast, expert):
        assert r.correct and not r.detectors, r.reason
        assert r.timings is not None and "s(t)=ln(t_ref/t)" in r.reward_formula
    assert 0.0 < slow.reward < 0.1 < fast.reward < expert.reward, (slow.reward, fast.reward)
    assert 0.3 < expert.reward < 0.8, expert.timings
    assert slow.timings.candidate_s > fast.timings.candidate_s > expert.timings.candidate_s


@pytest.mark.slow
def test_honest_kernels_slower_than_the_reference_stay_positive_and_ordered() -> None:
    """Twice and six times the reference's work: below the floor of 0.1, above 0, in order;
    both under an honest kernel as fast as the expert."""
    runs = {
        n: verify_kernel("softmax", candidate("softmax", n), timing_overrides=TIMED)
        for n in ("honest", "honest_slow", "honest_slower")
    }
    for name, r in runs.items():
        assert r.correct and not r.detectors, (name, r.reason, r.detectors)
    assert 0.0 < runs["honest_slower"].reward < runs["honest_slow"].reward < 0.1
    assert runs["honest_slow"].reward < runs["honest"].reward


@pytest.mark.slow
@pytest.mark.parametrize(
    "task",
    ["softmax", "layernorm", "matmul_bias_gelu", "logsumexp", "causal_attention", "mxfp4_matmul"],
)
def test_expert_of_every_task_passes_its_own_verifier(task: str) -> None:
    result = verify_kernel(
        task,
        TASKS_DIR / task / "expert.py",
        timing_overrides={"trials": 3, "iterations": 1, "warmups": 1},
    )
    assert result.correct and not result.detectors, (result.reason, result.detectors)
    # speed against the reference is noise-bound at three samples; the ordering test has margins
    assert result.timings is not None and result.timings.roofline_s > 0
    phases = {c.phase for c in result.checks}
    assert {"warmup", "trial", "timing", "pointer", "near", "one", "repeat"} <= phases, phases
    assert sum(c.phase == "trial" for c in result.checks) >= 5


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("crash", "candidate raised"),
        ("segfault", "sandboxed run died"),
        ("flood", "output flood"),
    ],
)
def test_failing_candidates_get_zero(name: str, reason: str) -> None:
    result = verify_kernel("softmax", candidate("softmax", name), timing_overrides=SHORT)
    assert result.reward == 0.0 and reason in result.reason, result.reason


@pytest.mark.slow
def test_hanging_candidate_is_killed_and_the_caller_carries_on() -> None:
    hung = verify_kernel(
        "softmax", candidate("softmax", "hang"), timing_overrides=SHORT, timeout_s=30
    )
    assert hung.reward == 0.0 and hung.reason.startswith("timeout"), hung.reason
    after = verify_kernel("softmax", candidate("softmax", "honest"), timing_overrides=SHORT)
    assert after.correct, after.reason


def test_bad_input_names_the_problem(tmp_path) -> None:
    with pytest.raises(UnknownTask, match="no kernel task 'nope'"):
        verify_kernel("nope", candidate("softmax", "honest"))
    with pytest.raises(BadCandidate, match="does not exist"):
        verify_kernel("softmax", tmp_path / "missing.py")
    with pytest.raises(BadCandidate, match="defines no 'softmax'"):
        verify_kernel("softmax", candidate("softmax", "no_entry"))
    (tmp_path / "a.py").write_text("def softmax(x):\n    return x\n")
    (tmp_path / "b.py").write_text("")
    with pytest.raises(BadCandidate, match="needs a candidate.py"):
        verify_kernel("softmax", tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(BadCandidate, match="not a Python file"):
        verify_kernel("softmax", tmp_path / "notes.txt")
