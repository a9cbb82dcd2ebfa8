"""The verifier's verification routes: each ``POST /verify/<kind>`` (and ``POST /judge``)
checks its input, then records a job on the shared job model and queues it on that kind's own
Celery queue; ``GET /jobs/{id}`` returns status, progress and the result (reward, per-check
details, detector hits, logs, artefact keys). Submission-loop sessions are plain REST: the
public verifier answers at once; the hidden one runs as a job.
"""

from __future__ import annotations

import secrets
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from services.verifier.bodies import KernelJobInput, SubmissionJobInput, WebJobInput
from services.verifier.judges.grm import GRMRequest
from services.verifier.judges.world import WorldJudgeRequest
from services.verifier.kernel.register import (
    KernelTaskRegistration,
    TaskExists,
    TaskRejected,
    register_kernel_task,
)
from services.verifier.kernel.spec import UnknownTask, load_task, task_names
from services.verifier.kernel.verify import BadCandidate, candidate_files, static_hits
from services.verifier.models import SubmissionSessionRow
from services.verifier.submission import session as sessions
from services.verifier.submission.tasks import TASKS as SUBMISSION_TASKS
from services.verifier.submission.tasks import BadSubmission
from services.verifier.tasks import kind_queue
from shared.clients import ServiceError, ToolsClient
from shared.errors import APIError, Error, conflict, not_found
from shared.jobs import JobView, submit
from shared.settings import get_settings

router = APIRouter(tags=["verify"])
ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": Error, "description": "Unknown task, session or world"},
    422: {"model": Error, "description": "The input cannot be verified (the message says why)"},
    503: {"model": Error, "description": "The queue could not take the job"},
}


def _queue(request: Request, kind: str, payload: BaseModel) -> JobView:
    task = request.app.state.tasks.for_kind(kind)
    return submit(
        request.app.state.jobs,
        task,
        kind=kind,
        payload=payload.model_dump(mode="json"),
        queue=kind_queue(kind),
    )


def unprocessable(message: str, code: str = "unverifiable") -> APIError:
    return APIError(422, code, message)


class TaskList(BaseModel):
    kernel: list[str]
    web: list[str]
    submission: list[str]


@router.get("/verify/tasks", response_model=TaskList, operation_id="listVerifyTasks")
def list_tasks() -> TaskList:
    """Shipped tasks and users' own (the tasks folder, API-registered kernel tasks)."""
    from services.verifier.web.spec import web_task_names

    return TaskList(kernel=task_names(), web=web_task_names(), submission=sorted(SUBMISSION_TASKS))


class RegisteredTask(BaseModel):
    name: str
    entry_point: str
    directory: str


@router.post(
    "/verify/kernel/tasks",
    response_model=RegisteredTask,
    status_code=201,
    operation_id="registerKernelTask",
    responses={**ERRORS, 409: {"model": Error, "description": "A task of that name exists"}},
)
def register_kernel_task_route(body: KernelTaskRegistration) -> RegisteredTask:
    """Register a kernel task (task.yaml fields, reference.py, expert.py); it is loaded and run
    on every shape now, and refused with its error if any of that fails."""
    try:
        task = register_kernel_task(body)
    except TaskExists as exc:
        raise conflict(str(exc)) from None
    except TaskRejected as exc:
        raise unprocessable(f"the task does not load: {exc}", "bad_task") from None
    return RegisteredTask(
        name=task.name, entry_point=task.entry_point, directory=str(task.directory)
    )


def _require_judge(field: str) -> None:
    if not get_settings().verifier.judge_model:
        raise unprocessable(
            f"{field}: no judge model is configured (set K3STACK_VERIFIER__JUDGE_MODEL and "
            "K3STACK_LLM_URL)",
            "no_judge",
        )


@router.post(
    "/verify/kernel",
    response_model=JobView,
    status_code=202,
    operation_id="verifyKernel",
    responses=ERRORS,
)
def verify_kernel_route(body: KernelJobInput, request: Request) -> JobView:
    """Verify a kernel candidate (its sources in the body) on a task; poll ``GET /jobs/{id}``."""
    try:
        task = load_task(body.task)
        with tempfile.TemporaryDirectory(prefix="k3s-check-") as tmp:
            entry, files = candidate_files(body.write(Path(tmp)))
            static_hits(task, entry, files)  # hits are a result; a missing entry point is not
    except UnknownTask as exc:
        raise APIError(404, "unknown_task", str(exc)) from None
    except BadCandidate as exc:
        raise unprocessable(str(exc)) from None
    return _queue(request, "kernel", body)


@router.post(
    "/verify/web",
    response_model=JobView,
    status_code=202,
    operation_id="verifyWeb",
    responses=ERRORS,
)
def verify_web_route(body: WebJobInput, request: Request) -> JobView:
    """Build and serve a web app in a sandbox, drive it with Chromium, compare with the reference."""
    from services.verifier.web.spec import UnknownWebTask, load_web_task

    try:
        load_web_task(body.task)
    except UnknownWebTask as exc:
        raise APIError(404, "unknown_task", str(exc)) from None
    if body.judge:
        _require_judge("judge")
    return _queue(request, "web", body)


@router.post(
    "/verify/world",
    response_model=JobView,
    status_code=202,
    operation_id="verifyWorld",
    responses=ERRORS,
)
def verify_world(body: WorldJudgeRequest, request: Request) -> JobView:
    """Resolve a world's checks at a time point through the tools service, model-judged ones
    included (skipped, with the reason, when no judge model is configured)."""
    try:
        with ToolsClient.from_settings(retries=0) as tools:
            tools.clock(body.world_id)
    except ServiceError as exc:
        if exc.status == 404:
            raise APIError(404, "unknown_world", f"world_id: no world {body.world_id!r}") from None
        raise APIError(503, "tools_unavailable", f"the tools service: {exc.message}") from None
    return _queue(request, "world", body)


@router.post(
    "/judge", response_model=JobView, status_code=202, operation_id="judge", responses=ERRORS
)
def judge_route(body: GRMRequest, request: Request) -> JobView:
    """The agentic GRM: rubric, scores, tournament and scoreboard under a verbosity budget."""
    _require_judge("model")
    return _queue(request, "judge", body)


# --- submission loop -------------------------------------------------------------------------


class NewSession(BaseModel):
    task: str = Field(min_length=1, max_length=100)


class SessionOut(sessions.PublicView):
    id: str


class SubmitBody(BaseModel):
    submission: dict[str, Any]


def _db(request: Request) -> Any:
    return request.app.state.db


def _load(s: Any, session_id: str) -> tuple[SubmissionSessionRow, sessions.SessionState]:
    row = s.get(SubmissionSessionRow, session_id)
    if row is None:
        raise not_found("submission session", session_id)
    return row, sessions.SessionState.model_validate(row.state)


@router.post(
    "/submission/sessions",
    response_model=SessionOut,
    status_code=201,
    operation_id="createSubmissionSession",
    responses=ERRORS,
)
def create_session(body: NewSession, request: Request) -> SessionOut:
    try:
        state = sessions.new_session(body.task)
    except sessions.UnknownSubmissionTask as exc:
        raise APIError(404, "unknown_task", str(exc)) from None
    sid = secrets.token_hex(16)
    with _db(request).session() as s:
        s.add(
            SubmissionSessionRow(
                id=sid, task=body.task, created_at=datetime.now(UTC), state=state.model_dump()
            )
        )
    return SessionOut(id=sid, **sessions.view(state).model_dump())


@router.get(
    "/submission/sessions/{session_id}",
    response_model=SessionOut,
    operation_id="getSubmissionSession",
    responses=ERRORS,
)
def get_session(session_id: str, request: Request) -> SessionOut:
    with _db(request).session() as s:
        _, state = _load(s, session_id)
    return SessionOut(id=session_id, **sessions.view(state).model_dump())


@router.post(
    "/submission/sessions/{session_id}/submit",
    response_model=sessions.SubmitResult,
    operation_id="submitToPublicVerifier",
    responses={**ERRORS, 409: {"model": Error, "description": "Budget spent or session finalized"}},
)
def submit_public(session_id: str, body: SubmitBody, request: Request) -> sessions.SubmitResult:
    """The public diagnostic verifier; each call is a submission against the budget."""
    with _db(request).session() as s:
        row, state = _load(s, session_id)
        try:
            out = sessions.submit(state, body.submission)
        except BadSubmission as exc:
            raise unprocessable(str(exc), "bad_submission") from None
        except (sessions.BudgetExhausted, sessions.SessionClosed) as exc:
            raise conflict(str(exc)) from None
        row.state = state.model_dump()
    return out


@router.post(
    "/verify/submission",
    response_model=JobView,
    status_code=202,
    operation_id="verifySubmission",
    responses=ERRORS,
)
def verify_submission(body: SubmissionJobInput, request: Request) -> JobView:
    """The hidden verifier on a session's final submission (once); the job's result is the reward."""
    with _db(request).session() as s:
        _, state = _load(s, body.session_id)
        if state.final is not None:
            raise conflict("the session is finalized")
        if body.submission is None and not state.submissions:
            raise unprocessable(
                "nothing to verify: submit once or pass a submission", "bad_submission"
            )
    return _queue(request, "submission", body)
