"""World checks: the tools service's verdict on a world at a time point, with its model-judged
checks run here.

The tools service owns the deterministic checks (``GET /worlds/{id}/checks``); the verifier
takes them as they are — so the two always agree — and adds what the tools service leaves to
it: each ``judge`` check's rubric read against its resolved inputs by a judge model. An event
passes when the tools service says so and all its judge checks pass.
"""

from __future__ import annotations

import json
from datetime import datetime

import openai
from pydantic import BaseModel, Field

from services.verifier.judges.model import ask_json, obj
from shared.clients import ToolsClient
from shared.contracts.tools import CheckResult, ChecksReport, JudgeCheck

JUDGE_SYSTEM = (
    "You check an assistant's work in a simulated workplace. Read the rubric and the evidence "
    '(what the assistant produced). Answer JSON {"passed": true | false, "reason": str}.'
)


class WorldJudgeRequest(BaseModel):
    world_id: str = Field(min_length=1, max_length=200)
    at: datetime | None = Field(
        None, description="Advance the world's clock to this time first (events fire on the way)."
    )
    model: str | None = Field(None, description="Judge model id (default: K3STACK_LLM_MODEL).")


class JudgedCheck(BaseModel):
    check_id: str
    rubric: str | None
    description: str
    passed: bool
    reason: str
    skipped: bool = Field(False, description="Not judged: no judge model is configured.")


class EventResult(BaseModel):
    event_id: str
    title: str
    status: str
    passed: bool = Field(description="The tools service's verdict and every judge check.")
    tools_passed: bool = Field(
        description="The tools service's own verdict (deterministic checks)."
    )
    checks: list[CheckResult]
    judge_checks: list[JudgedCheck]


class WorldJudgeResult(BaseModel):
    world_id: str
    clock: datetime
    events: list[EventResult]
    events_passed: int
    events_total: int
    reward: float = Field(description="Share of events passed.")


def _judge_one(client: openai.OpenAI, model: str | None, chk: JudgeCheck) -> JudgedCheck:
    evidence = json.dumps([i.model_dump(mode="json") for i in chk.inputs], ensure_ascii=False)[
        :50_000
    ]
    got = ask_json(
        client,
        model,
        JUDGE_SYSTEM,
        f"RUBRIC:\n{chk.rubric or chk.description}\n\nEVIDENCE:\n{evidence}",
        schema=obj({"passed": {"type": "boolean"}, "reason": {"type": "string"}}),
        name="check",
        needs=("passed",),
    )
    return JudgedCheck(
        check_id=chk.check_id, rubric=chk.rubric, description=chk.description,
        passed=got.get("passed") is True, reason=str(got.get("reason", ""))[:2000],
    )  # fmt: skip


def judge_world(
    req: WorldJudgeRequest, tools: ToolsClient, llm: openai.OpenAI | None
) -> WorldJudgeResult:
    if req.at is not None:
        now = tools.clock(req.world_id).now
        if req.at > now:
            tools.advance(req.world_id, to=req.at.isoformat(), timeout=600)
    report: ChecksReport = tools.checks(req.world_id)
    judged: dict[str, list[JudgedCheck]] = {}
    for chk in report.judge_checks:
        one = (
            _judge_one(llm, req.model, chk)
            if llm is not None
            else JudgedCheck(
                check_id=chk.check_id,
                rubric=chk.rubric,
                description=chk.description,
                passed=False,
                skipped=True,
                reason="skipped: no judge model is configured (K3STACK_VERIFIER__JUDGE_MODEL)",
            )  # fmt: skip
        )
        judged.setdefault(chk.event_id, []).append(one)
    events = [
        EventResult(
            event_id=e.event_id,
            title=e.title,
            status=str(e.status),
            tools_passed=e.passed,
            passed=e.passed and all(j.passed for j in judged.get(e.event_id, []) if not j.skipped),
            checks=e.checks,
            judge_checks=judged.get(e.event_id, []),
        )  # fmt: skip
        for e in report.events
    ]
    passed = sum(e.passed for e in events)
    return WorldJudgeResult(
        world_id=req.world_id, clock=report.clock, events=events, events_passed=passed,
        events_total=len(events), reward=passed / len(events) if events else 0.0,
    )  # fmt: skip
