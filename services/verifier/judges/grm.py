"""The agentic generative reward model (K3 report §4.1.2): read the artefact, write a rubric,
score each candidate against it, record everything on a scoreboard; for groups, a pairwise
round-robin tournament. A verbosity budget guards against length bias: with ℓ0 the reference
length (given, or the median candidate length) and σ the allowance, a candidate longer than
σ·ℓ0 words loses — its score is 0 and it loses every match against a candidate within budget
(two over-budget candidates draw), without asking the model.

Position bias: each pair is judged in both orders; a winner must win both, else it is a tie.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Literal

import openai
from pydantic import BaseModel, Field, field_validator

from services.verifier.judges.model import JudgeModelError, ask_json, obj

RUBRIC_SYSTEM = (
    "You are a careful reviewer. Read the task and the artefact, then write a grading rubric: "
    'JSON {"criteria": [{"name": str, "weight": number > 0, "description": str}, ...]} with 2 to 6 criteria.'
)
SCORE_SYSTEM = (
    "Grade the candidate against the rubric. For each criterion give an integer 0-10. "
    'Answer JSON {"scores": {"<criterion name>": int, ...}, "rationale": str}.'
)
COMPARE_SYSTEM = (
    "Compare two candidate answers against the rubric. "
    'Answer JSON {"winner": "A" | "B" | "tie", "rationale": str}.'
)
RUBRIC_SCHEMA = obj({"criteria": {"type": "array", "minItems": 1, "maxItems": 6, "items": obj(
    {"name": {"type": "string"}, "weight": {"type": "number"}, "description": {"type": "string"}}
)}})  # fmt: skip
COMPARE_SCHEMA = obj({"winner": {"type": "string", "enum": ["A", "B", "tie"]},
                      "rationale": {"type": "string"}})  # fmt: skip


def score_schema(rubric: list[Criterion]) -> dict:
    """The scores answer for this rubric: an integer 0-10 per criterion, by name."""
    scores = obj({c.name: {"type": "integer", "minimum": 0, "maximum": 10} for c in rubric})
    return obj({"scores": scores, "rationale": {"type": "string"}})


class GRMCandidate(BaseModel):
    id: str = Field(min_length=1, max_length=200)
    text: str = Field(max_length=200_000)


class GRMRequest(BaseModel):
    task: str = Field(
        min_length=1, max_length=100_000, description="What the candidates were asked to do."
    )
    artefact: str = Field(
        "", max_length=200_000, description="Material the judge reads first (spec, code, data)."
    )
    candidates: list[GRMCandidate] = Field(min_length=1, max_length=16)
    reference_length: int | None = Field(
        None, ge=1, description="ℓ0 in words (default: the median candidate length)."
    )
    sigma: float = Field(1.5, gt=0, description="Verbosity allowance σ: the budget is σ·ℓ0 words.")
    mode: Literal["pointwise", "tournament"] = "tournament"
    model: str | None = Field(None, description="Judge model id (default: K3STACK_LLM_MODEL).")

    @field_validator("candidates")
    @classmethod
    def _unique(cls, v: list[GRMCandidate]) -> list[GRMCandidate]:
        ids = [c.id for c in v]
        if len(set(ids)) != len(ids):
            raise ValueError("candidate ids must be unique")
        return v


class Criterion(BaseModel):
    name: str
    weight: float
    description: str = ""


class Match(BaseModel):
    a: str
    b: str
    winner: str | None = Field(description="Candidate id, or null for a tie.")
    decided_by: Literal["verbosity_budget", "model"]
    rationale: str = ""


class ScoreRow(BaseModel):
    id: str
    words: int
    over_budget: bool
    score: float = Field(description="Weighted rubric score in [0, 1]; 0 when over the budget.")
    criteria: dict[str, int] = Field(default_factory=dict)
    wins: int = 0
    losses: int = 0
    ties: int = 0
    points: float = 0.0
    rank: int = 0


class GRMResult(BaseModel):
    rubric: list[Criterion]
    budget_words: float
    reference_length: float
    sigma: float
    scoreboard: list[ScoreRow] = Field(description="Ranked: points (win 1, tie 0.5), then score.")
    matches: list[Match] = Field(default_factory=list)
    model_calls: int


def words(text: str) -> int:
    return len(text.split())


def _rubric(client: openai.OpenAI, req: GRMRequest) -> list[Criterion]:
    got = ask_json(
        client,
        req.model,
        RUBRIC_SYSTEM,
        f"TASK:\n{req.task}\n\nARTEFACT:\n{req.artefact or '(none)'}",
        schema=RUBRIC_SCHEMA,
        name="rubric",
        needs=("criteria",),
    )
    try:
        crit = [Criterion.model_validate(c) for c in got.get("criteria", [])]
    except ValueError as exc:
        raise JudgeModelError(f"rubric is malformed: {exc}") from exc
    crit = [c for c in crit if c.weight > 0 and c.name]
    if not crit:
        raise JudgeModelError("the judge model wrote a rubric without criteria")
    return crit


def _rubric_text(rubric: list[Criterion]) -> str:
    return "\n".join(f"- {c.name} (weight {c.weight:g}): {c.description}" for c in rubric)


def judge(client: openai.OpenAI, req: GRMRequest) -> GRMResult:
    calls = 0
    rubric = _rubric(client, req)
    calls += 1
    lengths = [words(c.text) for c in req.candidates]
    ell0 = float(req.reference_length or statistics.median(lengths))
    budget = req.sigma * ell0
    rows: dict[str, ScoreRow] = {}
    total_w = sum(c.weight for c in rubric)
    for cand, n in zip(req.candidates, lengths, strict=True):
        row = ScoreRow(id=cand.id, words=n, over_budget=n > budget, score=0.0)
        if not row.over_budget:
            got = ask_json(
                client,
                req.model,
                SCORE_SYSTEM,
                f"RUBRIC:\n{_rubric_text(rubric)}\n\nTASK:\n{req.task}\n\nCANDIDATE:\n{cand.text}",
                schema=score_schema(rubric),
                name="scores",
                needs=("scores",),
            )
            calls += 1
            scores = got.get("scores") if isinstance(got.get("scores"), dict) else {}
            for c in rubric:
                v = scores.get(c.name)
                row.criteria[c.name] = max(0, min(10, int(v))) if isinstance(v, int | float) else 0
            row.score = sum(c.weight * row.criteria[c.name] for c in rubric) / (10 * total_w)
        rows[cand.id] = row
    matches: list[Match] = []
    if req.mode == "tournament" and len(req.candidates) > 1:
        text = {c.id: c.text for c in req.candidates}
        for a, b in itertools.combinations([c.id for c in req.candidates], 2):
            ra, rb = rows[a], rows[b]
            if ra.over_budget or rb.over_budget:
                winner = None if ra.over_budget and rb.over_budget else (b if ra.over_budget else a)
                matches.append(
                    Match(
                        a=a,
                        b=b,
                        winner=winner,
                        decided_by="verbosity_budget",
                        rationale=f"budget {budget:g} words",
                    )
                )
                continue
            votes = []
            for first, second in ((a, b), (b, a)):
                got = ask_json(
                    client, req.model, COMPARE_SYSTEM,
                    f"RUBRIC:\n{_rubric_text(rubric)}\n\nTASK:\n{req.task}\n\nA:\n{text[first]}\n\nB:\n{text[second]}",
                    schema=COMPARE_SCHEMA, name="comparison", needs=("winner",),
                )  # fmt: skip
                calls += 1
                w = str(got.get("winner", "tie")).strip().upper()
                votes.append(first if w == "A" else second if w == "B" else None)
            winner = votes[0] if votes[0] == votes[1] else None
            matches.append(
                Match(
                    a=a,
                    b=b,
                    winner=winner,
                    decided_by="model",
                    rationale="both orders agree" if winner else "orders disagree or tie",
                )
            )
        for m in matches:
            for cid in (m.a, m.b):
                r = rows[cid]
                if m.winner is None:
                    r.ties += 1
                    r.points += 0.5
                elif m.winner == cid:
                    r.wins += 1
                    r.points += 1
                else:
                    r.losses += 1
    board = sorted(rows.values(), key=lambda r: (-r.points, -r.score, r.words))
    for i, r in enumerate(board):
        r.rank = i + 1
    return GRMResult(
        rubric=rubric,
        budget_words=budget,
        reference_length=ell0,
        sigma=req.sigma,
        scoreboard=board,
        matches=matches,
        model_calls=calls,
    )
