"""Rollout routes: create a batch, iterate it under a new policy version, inspect, export."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from services.orchestrator.admission import check_task
from services.orchestrator.harness.config import HarnessError, load_harness
from services.orchestrator.rollouts.export import export_lines
from services.orchestrator.rollouts.sample import release_cancelled
from services.orchestrator.rollouts.schema import RolloutCreate, RolloutIterate, RolloutView
from services.orchestrator.rollouts.service import (
    cancel_samples,
    create_rollout,
    iterate,
    rollout_queue,
    rollout_view,
)
from services.orchestrator.tools.builtin import UnknownTools, check_tool_names
from shared.errors import bad_request, not_found

router = APIRouter(tags=["rollouts"])


class NDJSONResponse(StreamingResponse):
    """One JSON document a line (the export's body)."""

    media_type = "application/x-ndjson"


def _view(request: Request, rollout_id: str) -> RolloutView:
    view = rollout_view(request.app.state.db, rollout_id)
    if view is None:
        raise not_found("rollout", rollout_id)
    return view


@router.post("/rollouts", response_model=RolloutView, status_code=202,
             operation_id="createRollout")  # fmt: skip
def post_rollout(body: RolloutCreate, request: Request) -> RolloutView:
    """Queue tasks x K samples, one Celery task each; K samples of a task fork one setup."""
    try:
        harness = load_harness(body.harness, request.app.state.settings.data_dir)
        check_tool_names(harness.tools)
    except KeyError as exc:
        raise bad_request(f"harness: {exc.args[0]}") from None
    except (HarnessError, UnknownTools) as exc:
        raise bad_request(f"harness: {exc}") from None
    if harness.kind != "white-box":  # a sample is the platform's own loop, token in and out
        raise bad_request(
            f"harness: {body.harness!r} is an installed agent ({harness.kind}); a rollout runs "
            "the white-box loop: name a white-box preset (e.g. codex, claude-code)"
        )
    seen: set[tuple[str | None, str | None]] = set()
    for i, task in enumerate(body.tasks):
        if (task.scenario, task.sandbox_template) not in seen:
            seen.add((task.scenario, task.sandbox_template))
            check_task(request.app.state.services, task, f"tasks[{i}]")
    rid = create_rollout(request.app.state.db, body, request.app.state.rollout_enqueue,
                         rollout_queue(request.app.state.settings))  # fmt: skip
    return _view(request, rid)


@router.post("/rollouts/{rollout_id}/iterate", response_model=RolloutView,
             operation_id="iterateRollout")  # fmt: skip
def post_iterate(rollout_id: str, body: RolloutIterate, request: Request) -> RolloutView:
    """Start the next iteration under a new policy version; paused samples resume first."""
    try:
        iterate(request.app.state.db, rollout_id, body, request.app.state.rollout_enqueue)
    except KeyError:
        raise not_found("rollout", rollout_id) from None
    return _view(request, rollout_id)


def _cancel(request: Request, rollout_id: str, sample_id: str | None) -> RolloutView:
    db = request.app.state.db
    try:
        idle = cancel_samples(db, rollout_id, sample_id)
    except KeyError as exc:
        raise not_found("sample" if exc.args[0] == sample_id else "rollout", exc.args[0]) from None
    for sid in idle:  # running ones release their own at their next tick
        release_cancelled(db, request.app.state.services, sid)
    return _view(request, rollout_id)


@router.post("/rollouts/{rollout_id}/cancel", response_model=RolloutView,
             operation_id="cancelRollout")  # fmt: skip
def post_cancel(rollout_id: str, request: Request) -> RolloutView:
    """Cancel every unfinished sample: phase ``cancelled``; a running one stops at its next
    tick, and each one's world and sandbox are released."""
    return _cancel(request, rollout_id, None)


@router.post("/rollouts/{rollout_id}/samples/{sample_id}/cancel", response_model=RolloutView,
             operation_id="cancelRolloutSample")  # fmt: skip
def post_cancel_sample(rollout_id: str, sample_id: str, request: Request) -> RolloutView:
    """Cancel one sample (409 once it ended); the others go on."""
    return _cancel(request, rollout_id, sample_id)


@router.get("/rollouts/{rollout_id}", response_model=RolloutView, operation_id="getRollout")
def get_rollout(rollout_id: str, request: Request) -> RolloutView:
    """Per-sample phase, reward and policy-version spans."""
    return _view(request, rollout_id)


@router.get(
    "/rollouts/{rollout_id}/export", response_class=NDJSONResponse, operation_id="exportRollout",
    responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}}},
)  # fmt: skip
def export_rollout(
    rollout_id: str, request: Request, format: str = Query("jsonl", pattern="^(jsonl|atif)$")
) -> StreamingResponse:
    """JSONL (one sample a line) or ATIF v1.4 (one document a line)."""
    _view(request, rollout_id)
    lines = export_lines(request.app.state.db, rollout_id, format)
    return NDJSONResponse(lines)
