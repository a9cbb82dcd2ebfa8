"""The agentic GRM protocol against a scripted OpenAI-compatible endpoint (real HTTP)."""

from __future__ import annotations

import json
import re

import pytest

from services.verifier.judges.grm import GRMCandidate, GRMRequest, judge
from services.verifier.judges.model import JudgeModelError
from shared.llm import openai_client
from tests.verifier.scripted_llm import scripted_llm


def length_biased(system: str, user: str) -> str:
    """A judge that likes long answers: the bias the verbosity budget exists for."""
    if "grading rubric" in system:
        return json.dumps(
            {
                "criteria": [
                    {"name": "correct", "weight": 2, "description": "right"},
                    {"name": "clear", "weight": 1},
                ]
            }
        )
    if "Grade the candidate" in system:
        n = len(user.split("CANDIDATE:\n", 1)[1].split())
        return "Here you go: " + json.dumps(
            {"scores": {"correct": min(10, n // 10), "clear": 5}, "rationale": "long is good"}
        )
    a, b = re.search(r"\nA:\n(.*)\n\nB:\n(.*)", user, re.DOTALL).groups()
    return json.dumps(
        {"winner": "A" if len(a.split()) > len(b.split()) else "B", "rationale": "longer"}
    )


def _req(**kw) -> GRMRequest:
    cands = [
        GRMCandidate(id="concise", text="word " * 20),
        GRMCandidate(id="medium", text="word " * 30),
        GRMCandidate(id="verbose", text="word " * 200),
    ]
    return GRMRequest(task="Summarise the report.", artefact="The report.", candidates=cands, **kw)


def test_verbosity_budget_makes_the_long_candidate_lose() -> None:
    with scripted_llm(length_biased) as llm:
        result = judge(openai_client(base_url=llm.url, api_key="k"), _req(sigma=1.5))
        sent = [m["content"] for r in llm.requests for m in r["messages"]]
    assert result.reference_length == 30 and result.budget_words == 45
    board = {r.id: r for r in result.scoreboard}
    assert board["verbose"].over_budget and board["verbose"].score == 0.0
    assert board["verbose"].losses == 2 and board["verbose"].rank == 3
    assert [r.id for r in result.scoreboard] == ["medium", "concise", "verbose"]
    assert {m.decided_by for m in result.matches if "verbose" in (m.a, m.b)} == {"verbosity_budget"}
    assert not any("word " * 200 in s for s in sent), (
        "an over-budget candidate is never sent to the model"
    )
    assert [c.name for c in result.rubric] == ["correct", "clear"]
    # rubric 1 + two scored candidates + one model-judged pair in both orders
    assert result.model_calls == len(llm.requests) == 1 + 2 + 2


def test_without_a_binding_budget_the_biased_judge_prefers_length() -> None:
    with scripted_llm(length_biased) as llm:
        result = judge(openai_client(base_url=llm.url, api_key="k"), _req(sigma=10))
    assert result.scoreboard[0].id == "verbose" and result.scoreboard[0].wins == 2


def test_reference_length_sets_the_budget_and_position_bias_is_a_tie() -> None:
    def first_wins(system: str, user: str) -> str:
        if "grading rubric" in system:
            return '{"criteria": [{"name": "correct", "weight": 1}]}'
        if "Grade the candidate" in system:
            return '{"scores": {"correct": 7}}'
        return '{"winner": "A"}'

    with scripted_llm(first_wins) as llm:
        result = judge(
            openai_client(base_url=llm.url, api_key="k"), _req(reference_length=10, sigma=2.5)
        )
    board = {r.id: r for r in result.scoreboard}
    assert result.budget_words == 25
    assert not board["concise"].over_budget and board["medium"].over_budget
    match = next(m for m in result.matches if {m.a, m.b} == {"concise", "medium"})
    assert match.winner == "concise" and match.decided_by == "verbosity_budget"
    assert board["concise"].score == pytest.approx(0.7)


def test_a_judge_that_never_answers_json_fails_clearly() -> None:
    with scripted_llm(lambda s, u: "I refuse.") as llm:
        with pytest.raises(JudgeModelError, match="no JSON"):
            judge(openai_client(base_url=llm.url, api_key="k"), _req())
        assert len(llm.requests) == 2  # asked again once


def test_every_question_asks_for_constrained_json_of_its_own_schema() -> None:
    with scripted_llm(length_biased) as llm:
        judge(openai_client(base_url=llm.url, api_key="k"), _req(sigma=1.5))
    formats = [r.get("response_format") for r in llm.requests]
    assert all(f and f["type"] == "json_schema" and f["json_schema"]["strict"] for f in formats)
    names = [f["json_schema"]["name"] for f in formats]
    assert names == ["rubric", "scores", "scores", "comparison", "comparison"]
    scores = formats[1]["json_schema"]["schema"]["properties"]["scores"]
    assert set(scores["required"]) == {"correct", "clear"}  # the rubric's own criteria
    winner = formats[3]["json_schema"]["schema"]["properties"]["winner"]
    assert winner["enum"] == ["A", "B", "tie"]


def test_an_empty_answer_is_asked_again_once() -> None:
    answers = iter(["", '{"criteria": [{"name": "right", "weight": 1}]}'])

    def flaky(system: str, user: str) -> str:
        if "grading rubric" in system:
            return next(answers)
        return '{"scores": {"right": 6}}' if "Grade" in system else '{"winner": "tie"}'

    with scripted_llm(flaky) as llm:
        result = judge(openai_client(base_url=llm.url, api_key="k"), _req(mode="pointwise"))
    assert [c.name for c in result.rubric] == ["right"]
    assert len(llm.requests) == 2 + 2  # the rubric twice, then each candidate within budget


def test_two_empty_answers_end_with_a_named_outcome() -> None:
    with scripted_llm(lambda s, u: "") as llm:
        with pytest.raises(JudgeModelError, match="an empty answer") as caught:
            judge(openai_client(base_url=llm.url, api_key="k"), _req())
        assert len(llm.requests) == 2
    assert caught.value.code == "judge_no_answer"


def test_request_validation() -> None:
    with pytest.raises(ValueError, match="unique"):
        GRMRequest(
            task="t", candidates=[GRMCandidate(id="a", text="x"), GRMCandidate(id="a", text="y")]
        )
    with pytest.raises(ValueError):
        GRMRequest(task="t", candidates=[])
