"""Episode routes: submit, inspect, trajectory, report, cancel."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select

from services.orchestrator.admission import check_task
from services.orchestrator.drivers import DRIVERS
from services.orchestrator.episode.export import to_shared, trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.schema import Episode, EpisodeCreate, EpisodeList
from services.orchestrator.episode.service import create_episode, episode_view, request_cancel
from services.orchestrator.harness.config import HarnessConfig, HarnessError, load_harness
from services.orchestrator.harness.memory import harness_skills, memory_problem
from services.orchestrator.report import render_report
from services.orchestrator.tools.builtin import UnknownTools, check_tool_names
from shared.contracts.orchestrator import HarnessFidelity
from shared.db import ServiceDatabase
from shared.errors import bad_request, not_found
from shared.trajectory import Trajectory

router = APIRouter(tags=["episodes"])


def _check_request(body: EpisodeCreate, request: Request) -> HarnessConfig:
    """Every field that could fail later, checked now; the resolved harness."""
    settings = request.app.state.settings
    try:
        harness = load_harness(body.harness, settings.data_dir)
        check_tool_names(harness.tools)
    except KeyError as exc:
        raise bad_request(f"harness: {exc.args[0]}") from None
    except (HarnessError, UnknownTools) as exc:
        raise bad_request(f"harness: {body.harness}: {exc}") from None
    problem = memory_problem(harness, body.memory)
    if problem:
        raise bad_request(problem)
    try:
        harness_skills(harness, settings.data_dir)
    except ValueError as exc:
        raise bad_request(f"harness: {body.harness}: skills_dirs: {exc}") from None
    if harness.kind == "installed" and not body.task.scenario:
        raise bad_request(
            f"task.scenario: the installed harness {body.harness!r} runs its CLI against a "
            "scenario's world; give task.scenario"
        )
    check_task(request.app.state.services, body.task)
    return harness


@router.post("/episodes", response_model=Episode, status_code=202, operation_id="createEpisode")
def post_episode(body: EpisodeCreate, request: Request) -> Episode:
    """Queue an episode (task + harness + policy + budgets); poll ``GET /episodes/{id}``."""
    harness = _check_request(body, request)
    db = request.app.state.db
    driver = DRIVERS.for_harness(harness)  # picked once, stored with the episode
    episode_id = create_episode(db, body, request.app.state.enqueue, harness, driver)
    return _view(db, episode_id)


@router.get("/episodes", response_model=EpisodeList, operation_id="listEpisodes")
def list_episodes(request: Request, limit: int = Query(50, ge=1, le=1000)) -> EpisodeList:
    with request.app.state.db.session() as s:
        rows = s.scalars(select(EpisodeRow).order_by(EpisodeRow.created_at.desc()).limit(limit))
        return EpisodeList(episodes=[episode_view(r) for r in rows])


@router.get("/episodes/{episode_id}", response_model=Episode, operation_id="getEpisode")
def get_episode(episode_id: str, request: Request) -> Episode:
    view = _view(request.app.state.db, episode_id)
    if view is None:
        raise not_found("episode", episode_id)
    return view


def _view(db: ServiceDatabase, episode_id: str) -> Episode | None:
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        return None if row is None else episode_view(row)


@router.get(
    "/episodes/{episode_id}/trajectory", response_model=Trajectory,
    operation_id="getEpisodeTrajectory",
)  # fmt: skip
def get_trajectory(episode_id: str, request: Request) -> Trajectory:
    """The episode's trajectory so far, in the platform's versioned format (model calls and
    their observations, compaction boundaries, score and exit)."""
    doc = trajectory(request.app.state.db, episode_id)
    if doc is None:
        raise not_found("episode", episode_id)
    return to_shared(doc)


@router.get(
    "/episodes/{episode_id}/fidelity", response_model=HarnessFidelity,
    operation_id="getEpisodeFidelity",
)  # fmt: skip
def get_fidelity(episode_id: str, request: Request) -> HarnessFidelity:
    """The harness's fingerprint (tools offered and called, argument names, system prompt size,
    requests per day, request size, compactions) for ``k3stack harness compare``."""
    from services.orchestrator.installed.compare import fidelity

    doc = trajectory(request.app.state.db, episode_id)
    if doc is None:
        raise not_found("episode", episode_id)
    return HarnessFidelity(rows=fidelity(doc))


@router.get(
    "/episodes/{episode_id}/report", response_class=HTMLResponse, operation_id="getEpisodeReport"
)
def get_report(episode_id: str, request: Request) -> HTMLResponse:
    """The HTML report (timeline over simulated days, check verdicts), current as of now."""
    doc = trajectory(request.app.state.db, episode_id)
    if doc is None:
        raise not_found("episode", episode_id)
    return HTMLResponse(render_report(doc))


@router.post("/episodes/{episode_id}/cancel", response_model=Episode, operation_id="cancelEpisode")
def cancel_episode(episode_id: str, request: Request) -> Episode:
    """Stop an episode: queued ones at once, running ones at their next step."""
    db = request.app.state.db
    if request_cancel(db, request.app.state.services, episode_id) is None:
        raise not_found("episode", episode_id)
    return _view(db, episode_id)
