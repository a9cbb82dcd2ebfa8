"""Every cheat gets reward 0 with its detector or the measurer's finding named.

``static=False`` runs the measured run alone, so each finding is proven without the source
scan in front of it; the attacks in the second list are written so that the scan sees nothing
(names built at run time, reached through ``__builtins__`` and ``getattr``) — the defence is
the measurer outside the candidate's process, not a list of words.
"""

from __future__ import annotations

import re

import pytest

from services.verifier.kernel.verify import verify_kernel
from tests.verifier.conftest import SHORT, candidate

CASES = [
    # (candidate, static checks on, detector that must be named)
    ("cache_pointer", True, "output_caching|uninitialized_output"),
    ("graph_replay", True, "cuda_graph_replay"),
    ("side_thread", True, "side_stream_or_thread"),
    ("lowered_precision", True, "lowered_precision"),
    ("library_call", True, "reference_library_call"),
    ("try_fallback", True, "try_except_fallback"),
    ("lazy_output", True, "lazy_output"),
    ("patched_timer", True, "timer_tampering"),
    ("mutates_input", True, "input_mutation"),
]
HIDDEN = [
    # module-global patching, the clock included (the time module's and the harness's)
    ("clock_global_patch", "timer_tampering"),
    ("patched_harness_clock", "timer_tampering"),
    ("beyond_roofline", "timer_tampering"),
    ("patched_timer", "timer_tampering"),
    # sys.modules and gc lookups for the expert or the reference
    ("expert_from_modules", "reference_lookup"),
    ("reference_from_heap", "reference_lookup"),
    # profiler-state probing, the library op behind a swallowed error
    ("profiler_probe", "reference_library_call"),
    ("library_call_hidden", "reference_library_call"),
    ("try_fallback", "reference_library_call"),
    # patched comparison functions (to pass an input check) and in-place work on the input
    ("patched_equal", "input_mutation"),
    ("patched_equal", "patched_comparison"),
    ("input_view", "input_mutation"),
    ("mutates_input", "input_mutation"),
    ("alias_input", "input_mutation"),
    # pointer-, shape- and value-keyed caches
    # (a returned cached tensor is all poison: the candidate's process overwrote it after the
    # call that first returned it; a cache keyed by part of the input answers a probe with one
    # element changed with a stale output; one keyed by all of it never answers a timed call,
    # every one being fresh, and shows by the memory it keeps)
    ("cache_pointer", "output_caching|uninitialized_output"),
    ("cache_shape", "output_caching|uninitialized_output"),
    ("cache_fingerprint", "output_caching|uninitialized_output"),
    ("cache_value_clone", "output_caching"),
    ("cache_sampled_hash", "output_caching"),
    ("cache_shape_first", "output_caching"),
    ("graph_replay", "output_caching|uninitialized_output"),
    # work on other threads
    ("side_thread", "side_stream_or_thread"),
    ("hidden_thread", "side_stream_or_thread"),
    ("split_threads", "side_stream_or_thread"),
    ("late_thread", "side_stream_or_thread"),
    # lowered precision, lazy outputs, outputs never written
    ("lowered_precision_hidden", "lowered_precision"),
    ("lazy_output", "lazy_output"),
    ("lazy_output_hidden", "lazy_output"),
    ("reads_reference", "uninitialized_output"),
    # other processes in the sandbox, each charged and each a hit: a child forked at import that
    # looks busy (the old measurer took it for the candidate), a fresh interpreter started at
    # import that runs the library op, a helper forked after ready, a double-forked daemon that
    # belongs to the sandbox's init and exists before any baseline
    ("fork_busy_child", "extra_process"),
    ("helper_at_import", "extra_process"),
    ("helper_after_ready", "extra_process"),
    ("daemon_before_baseline", "extra_process"),
    # a child per call that exits before the call returns: never alive when looked for, its CPU
    # is the sandbox's (the cgroup's, or the ticks its parent reaped)
    ("fork_per_call", "extra_process"),
    # the candidate's own process exec'd into the stub on a job of its writing (no op disabled)
    ("reexec_unblocked", "process_replaced"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "static", "detector"), CASES, ids=[c[0] for c in CASES])
def test_source_scan_flags_plain_cheats(name: str, static: bool, detector: str) -> None:
    result = verify_kernel("softmax", candidate("softmax", name), timing_overrides=SHORT)
    assert result.reward == 0.0, result.reason
    named = set(detector.split("|")) & result.detector_names
    assert named, (result.reason, result.detectors)
    assert any(d in result.reason for d in named)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "detector"), HIDDEN, ids=[f"{n}-{d}" for n, d in HIDDEN])
def test_measurer_catches_every_attack_without_the_source_scan(name: str, detector: str) -> None:
    result = verify_kernel(
        "softmax", candidate("softmax", name), timing_overrides=SHORT, static_checks=False
    )
    assert result.reward == 0.0, result.reason
    named = set(detector.split("|")) & result.detector_names
    assert named, (result.reason, result.detectors)
    assert all(d in result.reason for d in named)
    if name == "patched_harness_clock":  # 200x the work, moved off its own clock: all paid for
        assert result.timings is not None
        assert result.timings.candidate_s > 10 * result.timings.reference_s, result.timings


@pytest.mark.slow
def test_wrong_answer_is_incorrect_not_flagged() -> None:
    result = verify_kernel("softmax", candidate("softmax", "wrong"), timing_overrides=SHORT)
    assert result.reward == 0.0 and not result.correct
    assert result.reason.startswith("incorrect: max error "), result.reason
    assert re.search(r" on \w+ call \d+ \(check value; \d+ of \d+ checks failed\)", result.reason)
    assert result.detectors == [] and result.failed_check == "value"
    assert any(not c.ok and "differs from the reference" in c.detail for c in result.checks)


@pytest.mark.slow
def test_other_processes_are_found_without_a_cgroup(monkeypatch) -> None:
    """Where no cgroup can be made (an unprivileged container), the sandbox's process tree
    under the launcher's child stands in: a daemon that left the candidate's own tree is still
    in it, and the measured process is still the launcher's child, not one found by name."""
    from services.verifier.kernel import runner

    monkeypatch.setattr(runner, "make_group", lambda _name: None)
    result = verify_kernel(
        "softmax",
        candidate("softmax", "daemon_before_baseline"),
        timing_overrides=SHORT,
        static_checks=False,
    )
    assert result.reward == 0.0 and "extra_process" in result.detector_names, result.reason
    assert any("at ready" in d.evidence for d in result.detectors if d.detector == "extra_process")
