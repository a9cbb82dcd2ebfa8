"""Every cheat gets reward 0 with its detector named; static-hidden ones are caught at run time.

``static=False`` runs the dynamic layer alone, proving each run-time detector without the
source checks in front of it.
"""

from __future__ import annotations

import pytest

from services.verifier.kernel.verify import verify_kernel
from tests.verifier.conftest import SHORT, candidate

CASES = [
    # (candidate, static checks on, detector that must be named)
    ("cache_pointer", True, "output_caching"),
    ("cache_shape", True, "output_caching"),
    ("cache_fingerprint", True, "output_caching"),
    ("graph_replay", True, "cuda_graph_replay"),
    ("graph_replay", False, "output_caching"),
    ("side_thread", True, "side_stream_or_thread"),
    ("side_thread", False, "side_stream_or_thread"),
    ("lowered_precision", True, "lowered_precision"),
    ("lowered_precision_hidden", True, "lowered_precision"),
    ("library_call", True, "reference_library_call"),
    ("library_call_hidden", True, "reference_library_call"),
    ("try_fallback", True, "try_except_fallback"),
    ("try_fallback", False, "reference_library_call"),
    ("lazy_output", True, "lazy_output"),
    ("lazy_output", False, "lazy_output"),
    ("lazy_output_hidden", True, "lazy_output"),
    ("patched_timer", True, "timer_tampering"),
    ("patched_timer", False, "timer_tampering"),
    ("patched_harness_clock", True, "timer_tampering"),
    ("reads_reference", True, "reads_reference_output"),
    ("mutates_input", True, "input_mutation"),
    ("beyond_roofline", False, "beyond_roofline"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "static", "detector"),
    CASES,
    ids=[f"{n}-{'static' if s else 'dynamic'}" for n, s, _ in CASES],
)
def test_cheat_gets_zero_with_detector_named(name: str, static: bool, detector: str) -> None:
    result = verify_kernel(
        "softmax", candidate("softmax", name), timing_overrides=SHORT, static_checks=static
    )
    assert result.reward == 0.0, result.reason
    assert detector in result.detector_names, (result.reason, result.detectors)
    assert detector in result.reason


@pytest.mark.slow
def test_harness_clock_attack_is_caught_by_the_outside_clock() -> None:
    """The attack silences every in-sandbox check; the verifier's own clock still sees it."""
    result = verify_kernel(
        "softmax",
        candidate("softmax", "patched_harness_clock"),
        timing_overrides={"trials": 3, "iterations": 3, "warmups": 1},
        static_checks=False,
    )
    evidence = [d.evidence for d in result.detectors if d.detector == "timer_tampering"]
    assert any("wall-clock cross-check" in e for e in evidence), result.detectors
    assert result.timings is not None
    assert (
        result.timings.outside_hidden_s["candidate"] > result.timings.outside_hidden_s["reference"]
    )


@pytest.mark.slow
def test_wrong_answer_is_incorrect_not_flagged() -> None:
    result = verify_kernel("softmax", candidate("softmax", "wrong"), timing_overrides=SHORT)
    assert result.reward == 0.0 and not result.correct
    assert result.reason.startswith("incorrect")
    assert result.detectors == []
    assert any(not c.ok and "differs from the reference" in c.detail for c in result.checks)
