"""Submission-loop tasks: budget and penalties, and the hidden cases never reach the agent."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from services.verifier.submission import session as S
from services.verifier.submission.expression import ExpressionError, compile_expression
from services.verifier.submission.tasks import BadSubmission, BlackBoxFunction, HeldOutFactor


def _exact_expression(state: S.SessionState) -> str:
    a, b, c, d, e, m, r = BlackBoxFunction._params(state.hidden_seed)
    return f"({a})*x*x + ({b})*x + ({c}) if x % {m} == {r} else ({d})*x + ({e})"


def test_blackbox_right_answer_scores_one_and_wrong_scores_less() -> None:
    state = S.new_session("blackbox_function")
    first = S.submit(state, {"expression": "x", "probes": [0, 1, -1]})
    assert first.feedback.score < 1.0
    assert [p["x"] for p in first.feedback.details["probes"]] == [0, 1, -1]
    assert S.submit(state, {"expression": _exact_expression(state)}).feedback.score == 1.0
    final = S.finalize(state)
    assert final.hidden_score == 1.0 and final.reward == 1.0 and final.penalty == 0.0


def test_overfit_to_public_cases_fails_hidden() -> None:
    """A lookup table of the public cases passes the public verifier, not the hidden one."""
    state = S.new_session("blackbox_function")
    cases = S.submit(state, {"expression": "0"}).feedback.details["cases"]
    table = "0"
    for c in cases:
        table = f"({c['expected']}) if x == {c['x']} else ({table})"
    assert S.submit(state, {"expression": table}).feedback.score == 1.0
    assert S.finalize(state).hidden_score < 0.2


def test_budget_and_penalties() -> None:
    state = S.new_session("blackbox_function")
    t = BlackBoxFunction()
    for i in range(t.max_submissions):
        res = S.submit(state, {"expression": "x"})
        extra = max(0, i + 1 - t.free_submissions)
        assert res.budget.penalty_so_far == pytest.approx(extra * t.penalty_per_extra)
    with pytest.raises(S.BudgetExhausted, match="12 submissions"):
        S.submit(state, {"expression": "x"})
    final = S.finalize(state, {"expression": _exact_expression(state)})
    expected_penalty = (t.max_submissions - t.free_submissions) * t.penalty_per_extra
    assert final.penalty == pytest.approx(expected_penalty)
    assert final.reward == pytest.approx(1.0 - expected_penalty)
    with pytest.raises(S.SessionClosed):
        S.submit(state, {"expression": "x"})


def test_malformed_submissions_are_refused_without_counting() -> None:
    state = S.new_session("blackbox_function")
    for bad, match in [
        ({"expression": "__import__('os')"}, "not allowed"),
        ({"expression": "x ** 99"}, None),
        ({"expression": ""}, "non-empty"),
        ({"expression": "x", "probes": [10**6]}, "probe"),
        ({"expression": "x", "probes": list(range(17))}, "at most 16"),
    ]:
        if match is None:
            assert S.submit(state, bad).feedback.score < 1.0  # evaluation error -> case fails
            continue
        with pytest.raises(BadSubmission, match=match):
            S.submit(state, bad)
    assert S.budget(state).used == 1
    with pytest.raises(S.UnknownSubmissionTask, match="no submission task"):
        S.new_session("nope")
    factor = S.new_session("heldout_factor")
    with pytest.raises(BadSubmission, match="12 numbers"):
        S.submit(factor, {"weights": [1.0]})
    with pytest.raises(BadSubmission, match="finite"):
        S.submit(factor, {"weights": [float("nan")] * 12})


def test_expression_language_is_bounded() -> None:
    assert compile_expression("max(x, 3) if x % 2 == 0 else -abs(x) // 2")(4) == 4
    for src in ["open('f')", "x.__class__", "[x]", "lambda: 1", "(x ** 8) ** 8 ** 8"]:
        with pytest.raises(ExpressionError):
            compile_expression(src)(10**6)


def test_factor_true_signal_beats_overfit_on_hidden_rows() -> None:
    state = S.new_session("heldout_factor")
    brief = S.view(state).brief
    x, y = np.array(brief["features"]), np.array(brief["next_return"])
    assert x.shape == (HeldOutFactor.public_rows, HeldOutFactor.features)
    truth = HeldOutFactor._truth(state.hidden_seed)
    t = HeldOutFactor()
    hidden_truth = t.hidden_score(state.public_seed, state.hidden_seed, {"weights": truth.tolist()})
    noise = np.random.default_rng(0).standard_normal(12)
    hidden_noise = t.hidden_score(state.public_seed, state.hidden_seed, {"weights": noise.tolist()})
    assert hidden_truth == pytest.approx(1.0)
    assert hidden_noise < 0.6
    S.submit(state, {"weights": np.linalg.lstsq(x, y, rcond=None)[0].tolist()})
    assert 0.0 <= S.finalize(state).reward <= 1.0


@pytest.mark.parametrize("task", ["blackbox_function", "heldout_factor"])
def test_hidden_cases_never_reach_the_agent(task: str) -> None:
    """Everything the agent can read (brief, every feedback, the final result) is free of the
    hidden seed, the hidden points / rows, and the hidden truth."""
    state = S.new_session(task)
    shown = [S.view(state).model_dump_json()]
    if task == "blackbox_function":
        for probes in ([1, 2, 3], [-100, 100]):
            shown.append(S.submit(state, {"expression": "x*x", "probes": probes}).model_dump_json())
        hidden = [
            str(v) for v in BlackBoxFunction()._hidden_points(state.hidden_seed) if abs(v) > 1000
        ]
    else:
        shown.append(S.submit(state, {"weights": [1.0] * 12}).model_dump_json())
        t = HeldOutFactor()
        hx, _ = t._rows(state.hidden_seed ^ 0xF00D, 50, state.hidden_seed)
        hidden = [f"{v:.6f}" for v in hx.ravel()[:200]]
        hidden += [f"{v:.6f}" for v in HeldOutFactor._truth(state.hidden_seed) if v]
    shown.append(S.finalize(state).model_dump_json())
    blob = "\n".join(shown)
    assert str(state.hidden_seed) not in blob
    assert "hidden_seed" not in blob
    # numbers are compared whole (sign included); a public six-decimal value may equal one hidden
    # value by chance (about 6% of sessions), a leak shows many
    if task == "blackbox_function":
        leaked = [h for h in hidden if h in blob]
        assert not leaked, leaked[:5]
    else:
        shown_numbers = set(re.findall(r"-?\d+\.\d+", blob))
        leaked = [h for h in hidden if h in shown_numbers]
        assert len(leaked) <= 2, leaked[:5]
    assert json.loads(shown[-1]).keys() == {"hidden_score", "submissions_used", "penalty", "reward"}
