"""The soak's classification table and HTML report (scripts/soak_report.py), from a made-up run:
every kind counted in its column, a BELOW_FULL run and a violation shown, plots drawn."""

from __future__ import annotations

from scripts.soak_report import Run, Sample, SoakResult, outcome_table, percentile, write_report


def _result() -> SoakResult:
    r = SoakResult(minutes=1, concurrency=2)
    r.runs = [
        Run("episode", "hr_onboarding / codex", 0, 30, "full"),
        Run("episode", "hr_leave / hermes", 5, 40, "BELOW_FULL", "39/40"),
        Run("episode", "finance_expenses / kimi-code", 6, 50, "named:worker_lost"),
        Run("sandbox", "churn", 1, 9, "error:ConnectError"),
        Run("world", "hr_leave", 2, 3, "full"),
        Run("kernel", "softmax expert", 2, 0, ""),  # still in flight: not counted as ended
    ]
    r.samples = [
        Sample(t, 1.0 + t / 10, 2, {"model": 300 + t}, {"model": 5.0 + t}) for t in range(0, 60, 5)
    ]
    r.faults = [(20.0, "SIGKILL orchestrator-worker (group 1)")]
    r.violations = ["1 runs succeeded below full score"]
    return r


def test_outcome_table_counts_each_verdict_in_its_column() -> None:
    rows = {row[0]: row[1:] for row in outcome_table(_result().runs)}
    assert rows["episode"] == (3, 1, 1, 1, 0)
    assert rows["sandbox"] == (1, 0, 0, 0, 1)
    assert rows["world"] == (1, 1, 0, 0, 0)
    assert rows["kernel"] == (0, 0, 0, 0, 0)


def test_percentile_of_nothing_is_zero_and_p99_is_the_top() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([float(i) for i in range(100)], 0.99) == 99.0


def test_report_shows_the_failure_the_faults_and_the_plots(tmp_path) -> None:
    path = tmp_path / "soak.html"
    write_report(_result(), path)
    page = path.read_text()
    assert "<b>FAIL</b>" in page and "succeeded below full score" in page
    assert "SIGKILL orchestrator-worker" in page
    assert page.count("<svg") == 5 and page.count("<polyline") >= 5
    assert "named:worker_lost: 1" in page
