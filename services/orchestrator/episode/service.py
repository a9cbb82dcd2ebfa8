"""Episode bookkeeping shared by the API, the worker task and the reaper."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import (
    TERMINAL,
    Services,
    _aware,
    now_utc,
    release_resources,
)
from services.orchestrator.episode.schema import Episode, EpisodeCreate, EventResult

log = logging.getLogger("k3stack.orchestrator")


def services_from_settings(settings: Any, objects: Any = None) -> Services:
    from shared.clients import ModelClient, SandboxClient, ToolsClient

    if objects is None:
        from shared.objectstore import make_object_store

        objects = make_object_store(settings)
    return Services(
        tools=ToolsClient.from_settings(settings),
        sandbox=SandboxClient.from_settings(settings, timeout=max(settings.http_timeout_s, 660)),
        model=ModelClient.from_settings(settings, timeout=max(settings.http_timeout_s, 660)),
        settings=settings,
        objects=objects,
    )


def create_episode(db: Any, body: EpisodeCreate, enqueue: Callable[[str], None]) -> str:
    """Row first, then the queue; a failed enqueue marks the row failed."""
    episode_id = "ep_" + uuid.uuid4().hex[:20]
    now = now_utc()
    with db.session() as s:
        s.add(
            EpisodeRow(
                id=episode_id, kind="episode", status="queued", created_at=now, updated_at=now,
                request=body.model_dump(mode="json"), state={}, progress=0.0, attempts=0,
                cancel_requested=False, resources_released=False,
            )
        )  # fmt: skip
    try:
        enqueue(episode_id)
    except Exception as exc:  # noqa: BLE001 - the row says why, never "queued" forever
        with db.session() as s:
            row = s.get(EpisodeRow, episode_id)
            row.status, row.error_code = "failed", "enqueue_failed"
            row.error_message = f"could not queue the episode: {exc}"
    return episode_id


def episode_view(row: EpisodeRow) -> Episode:
    req = row.request or {}
    state = row.state or {}
    result = row.result or {}
    usage = state.get("usage") or {}
    task = req.get("task") or {}
    return Episode(
        id=row.id,
        status=row.status,  # type: ignore[arg-type]
        harness=req.get("harness", ""),
        policy=(req.get("policy") or {}).get("kind", ""),
        scenario=task.get("scenario"),
        seed=task.get("seed", 0),
        created_at=_aware(row.created_at),  # type: ignore[arg-type]
        updated_at=_aware(row.updated_at),  # type: ignore[arg-type]
        step=state.get("step", 0),
        tokens=usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
        compactions=state.get("compactions", 0),
        simulated_day=state.get("day", 1),
        world_clock=state.get("clock"),
        reward=row.reward,
        events_passed=result.get("events_passed"),
        events_total=result.get("events_total"),
        results=[
            EventResult(
                event_id=e["event_id"],
                title=e.get("title"),
                status=e.get("status", ""),
                passed=bool(e.get("passed")),
                checks=e.get("checks") or [],
            )
            for e in result.get("events") or []
        ],  # fmt: skip
        exit_reason=state.get("exit_reason"),
        exit_detail=state.get("exit_detail"),
        error_code=row.error_code,
        error_message=row.error_message,
        cancel_requested=row.cancel_requested,
        sandbox_id=row.sandbox_id,
        world_id=row.world_id,
        attempts=row.attempts,
    )


def request_cancel(db: Any, svc: Services | None, episode_id: str) -> EpisodeRow | None:
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        if row is None:
            return None
        if row.status in TERMINAL:
            return row
        row.cancel_requested = True
        if row.status == "queued":
            row.status = "cancelled"
        row.updated_at = now_utc()
    if svc is not None:
        release_resources(db, svc, episode_id)
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
        return row


def reap(db: Any, svc: Services | None, enqueue: Callable[[str], None]) -> dict[str, list[str]]:
    """Re-queue episodes whose worker's lease lapsed; release leftovers of finished ones."""
    now = now_utc()
    requeued, released = [], []
    with db.session() as s:
        rows = s.scalars(select(EpisodeRow).where(EpisodeRow.status == "running")).all()
        for row in rows:
            expires = _aware(row.lease_expires_at)
            if expires is not None and expires < now:
                if row.cancel_requested:
                    row.status = "cancelled"
                else:
                    row.status, row.worker = "queued", None
                    requeued.append(row.id)
                row.updated_at = now
        leftovers = s.scalars(
            select(EpisodeRow.id).where(
                EpisodeRow.status.in_(TERMINAL), EpisodeRow.resources_released.is_(False)
            )
        ).all()
    for episode_id in requeued:
        try:
            enqueue(episode_id)
        except Exception:  # noqa: BLE001 - the next reap tries again
            log.exception("re-queueing episode %s failed", episode_id)
    if svc is not None:
        for episode_id in leftovers:
            release_resources(db, svc, episode_id)
            released.append(episode_id)
    return {"requeued": requeued, "released": released}
