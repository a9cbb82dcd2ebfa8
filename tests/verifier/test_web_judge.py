"""The web verifier's optional model-judge term, against a scripted OpenAI-compatible endpoint
(a real HTTP server on loopback, through the official client of ``shared/llm.py``). The apps
are served on loopback and driven by real Chromium; no sandbox is needed for the scoring."""

from __future__ import annotations

import dataclasses

import pytest

from services.verifier.web.browser import BrowserReport, run_checks
from services.verifier.web.judge import WebJudge
from services.verifier.web.spec import WebTask, load_web_task
from services.verifier.web.verify import _score, _serve_reference
from shared.llm import openai_client
from tests.helpers.servers import free_port
from tests.verifier.scripted_llm import scripted_llm
from tests.verifier.web_service import APPS

pytestmark = [pytest.mark.browser]
WORD = "cedar42"


def _drive(app: str) -> BrowserReport:
    task = load_web_task("counter_todo")
    with _serve_reference(APPS / app if app else task.reference_dir) as url:
        return run_checks(url, task.checks, WORD, task.viewport)


@pytest.fixture(scope="module")
def runs() -> tuple[WebTask, BrowserReport, BrowserReport]:
    return load_web_task("counter_todo"), _drive(""), _drive("partial/src")


def _judge(url: str) -> WebJudge:
    return WebJudge(client=openai_client(base_url=url, api_key="test", max_retries=0), model="j")


def test_judge_score_is_weighted_into_the_reward(runs) -> None:  # noqa: ANN001
    task, ref, partial = runs
    plain = _score(task, ref, partial, "")
    with scripted_llm(lambda s, u: 'Verdict: {"score": 4, "reason": "clear is missing"}') as llm:
        judged = _score(task, ref, partial, "", judge=_judge(llm.url), source="<html>x</html>")
    assert plain.judge is None and judged.judge is not None
    assert judged.judge.score == pytest.approx(0.4) and judged.judge.reason == "clear is missing"
    w = task.weights
    expect = (w.functional * plain.pass_rate + w.dom * plain.dom_similarity
              + w.pixel * plain.pixel_similarity + w.judge * 0.4) / (w.functional + w.dom + w.pixel + w.judge)  # fmt: skip
    assert judged.reward == pytest.approx(expect)
    assert judged.reward < plain.reward  # a low judge score pulls a 2/3 app down
    prompt = llm.requests[0]["messages"][1]["content"]
    assert task.spec in prompt and "clear: FAIL" in prompt and "<html>x</html>" in prompt
    assert llm.requests[0]["model"] == "j"


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("I would rather not say.", "gave no JSON object"),
        ('{"score": 42, "reason": "great"}', "not a number in 0-10"),
        ('{"score": "high"}', "not a number in 0-10"),
        ('{"reason": "no score"}', "no JSON object with the keys score"),  # asked twice
    ],
)
def test_a_garbage_judge_answer_drops_the_term(runs, answer: str, why: str) -> None:  # noqa: ANN001
    task, ref, partial = runs
    plain = _score(task, ref, partial, "")
    with scripted_llm(lambda s, u: answer) as llm:
        res = _score(task, ref, partial, "", judge=_judge(llm.url))
    assert res.judge is not None and res.judge.score is None
    assert res.judge.reason.startswith("judge term dropped") and why in res.judge.reason
    assert res.reward == pytest.approx(plain.reward) and "judge dropped" in res.reason


def test_an_unreachable_judge_drops_the_term(runs) -> None:  # noqa: ANN001
    task, ref, partial = runs
    res = _score(task, ref, partial, "", judge=_judge(f"http://127.0.0.1:{free_port()}/v1"))
    assert res.judge is not None and res.judge.score is None
    assert "judge model call failed" in res.judge.reason
    assert res.reward == pytest.approx(_score(task, ref, partial, "").reward)


def test_zero_rules_are_not_judged_away(runs) -> None:  # noqa: ANN001
    task, ref, partial = runs
    broken = dataclasses.replace(partial, page_errors=["ReferenceError: undefinedHelper"])
    with scripted_llm(lambda s, u: '{"score": 10, "reason": "perfect"}') as llm:
        res = _score(task, ref, broken, "", judge=_judge(llm.url))
    assert res.zero_rule == "runtime_error" and res.reward == 0.0
    assert llm.requests == []  # a zeroed app never reaches the judge
