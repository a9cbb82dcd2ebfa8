"""Episode bookkeeping shared by the API, the worker task and the reaper."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import object_session

from services.orchestrator.episode.journal import current_state
from services.orchestrator.episode.models import EpisodeRow, TrajectoryItemRow
from services.orchestrator.episode.platform import Services
from services.orchestrator.episode.runner import release_resources
from services.orchestrator.episode.schema import Episode, EpisodeCreate, EventResult
from services.orchestrator.episode.store import (
    TASK_NAME,
    TERMINAL,
    EpisodeStore,
    aware,
    episode_queue,
    now_utc,
)
from services.orchestrator.harness.config import HarnessConfig
from shared.db import ServiceDatabase
from shared.errors import APIError
from shared.jobs import JobReaper
from shared.objectstore.base import ObjectStore
from shared.settings import Settings

log = logging.getLogger("k3stack.orchestrator")


def services_from_settings(settings: Settings, objects: ObjectStore | None = None) -> Services:
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


def create_episode(
    db: ServiceDatabase,
    body: EpisodeCreate,
    enqueue: Callable[[str], None],
    harness: HarnessConfig | None = None,
    driver: str | None = None,
) -> str:
    """Row first (a job of kind ``episode``, queued), then the queue; a failed enqueue marks
    the row failed (``enqueue_failed``), never "queued" forever. ``harness`` (the resolved
    :class:`HarnessConfig`, as checked at submit) is stored with the episode, so editing the
    preset later changes no queued or resumed episode; so is ``driver``, the name of the
    driver that runs it (picked from the registry at submit; none: at its first start)."""
    store = EpisodeStore(db)
    job = store.create(
        kind="episode", payload=body.model_dump(mode="json"), task_name=TASK_NAME, queue=episode_queue(),
        job_id="ep_" + uuid.uuid4().hex[:20],
    )  # fmt: skip
    if driver is not None:
        with db.session() as s:
            s.get(EpisodeRow, job.id).driver = driver
    if harness is not None:
        store_harness(db, job.id, harness)
    try:
        enqueue(job.id)
    except Exception as exc:  # noqa: BLE001 - the row says why
        store.mark_enqueue_failed(job.id, f"could not queue the episode: {exc}")
    return job.id


def store_harness(db: ServiceDatabase, episode_id: str, harness: HarnessConfig) -> None:
    """The episode's resolved harness, its trajectory's item 0."""
    with db.session() as s:
        s.add(
            TrajectoryItemRow(
                episode_id=episode_id, seq=0, segment=0, kind="harness", at=now_utc(),
                body={"harness": harness.model_dump(mode="json")},
            )
        )  # fmt: skip


def episode_view(row: EpisodeRow) -> Episode:
    """The API's view of an episode (a row in an open session), its counters the journal's
    state as of the last committed tick."""
    state = current_state(object_session(row), row)
    req = row.request or {}
    result = row.result or {}
    task = req.get("task") or {}
    return Episode(
        id=row.id,
        status=row.status,  # type: ignore[arg-type]
        harness=req.get("harness", ""),
        policy=(req.get("policy") or {}).get("kind", ""),
        scenario=task.get("scenario"),
        seed=task.get("seed", 0),
        created_at=aware(row.created_at),  # type: ignore[arg-type]
        updated_at=aware(row.updated_at),  # type: ignore[arg-type]
        step=state.step,
        tokens=state.usage.total,
        compactions=state.compactions,
        simulated_day=state.day,
        world_clock=state.clock,
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
        exit_reason=state.exit_reason,
        exit_detail=state.exit_detail,
        error_code=row.error_code,
        error_message=row.error_message,
        cancel_requested=row.cancel_requested,
        sandbox_id=row.sandbox_id,
        world_id=row.world_id,
        attempts=row.attempts,
    )


def request_cancel(db: ServiceDatabase, svc: Services | None, episode_id: str) -> EpisodeRow | None:
    """Cancel the episode's job (its status is ``cancelled`` at once). A queued one never
    starts; a running one's worker stops at its next tick (or heartbeat) and releases its
    sandbox and world itself, so they are not pulled from under the tick it is in; a
    finished one is left as it is."""
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        if row is None:
            return None
        was = row.status
    if was not in TERMINAL:
        try:
            EpisodeStore(db).cancel(episode_id)
        except APIError:  # finished meanwhile
            pass
    if svc is not None and was != "running":
        release_resources(db, svc, episode_id)
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
        return row


def reap(
    db: ServiceDatabase,
    svc: Services | None,
    enqueue: Callable[[str], None],
    store: EpisodeStore | None = None,
) -> dict[str, list[str]]:
    """The shared job model's recovery rule for episodes (a ``running`` one whose heartbeat is
    older than the lease is re-queued, or failed ``worker_lost`` after
    ``K3STACK_JOB_MAX_ATTEMPTS`` starts), then the leftovers of finished ones released."""
    requeued, released = [], []
    store = store or EpisodeStore(db, svc.settings if svc else None)
    for job in store.expire_lost():
        log.warning("episode %s lost its worker; re-queued (attempt %d)", job.id, job.attempts)
        requeued.append(job.id)
    with db.session() as s:
        leftovers = s.scalars(
            select(EpisodeRow.id).where(
                EpisodeRow.status.in_(TERMINAL), EpisodeRow.resources_released.is_(False)
            )
        ).all()
    for episode_id in requeued:
        try:
            enqueue(episode_id)
        except Exception as exc:  # noqa: BLE001 - the row says why, never "queued" forever
            log.exception("re-queueing episode %s failed", episode_id)
            store.mark_enqueue_failed(episode_id, f"could not queue the episode again: {exc}")
    if svc is not None:
        for episode_id in leftovers:
            release_resources(db, svc, episode_id)
            released.append(episode_id)
    return {"requeued": requeued, "released": released}


class EpisodeReaper(JobReaper):
    """The shared :class:`JobReaper` thread with the orchestrator's pass: lapsed episodes
    re-queued (their resources released once finished), then the extensions' own passes
    (``also``: name -> pass returning the ids it handled; the rollout samples', given by the
    app, so the core imports no extension)."""

    def __init__(
        self,
        db: ServiceDatabase,
        svc: Services | None,
        enqueue: Callable[[str], None],
        interval_s: float,
        also: dict[str, Callable[[], list[str]]] | None = None,
    ) -> None:
        store = EpisodeStore(db, svc.settings if svc else None)
        super().__init__(store, None, interval_s)  # type: ignore[arg-type] # no Celery app: its own enqueue
        self.db, self.svc, self.enqueue, self.also = db, svc, enqueue, dict(also or {})

    def reap_once(self) -> dict[str, list[str]]:
        out = reap(self.db, self.svc, self.enqueue, self.store)  # type: ignore[arg-type]
        for name, reap_pass in self.also.items():
            out[name] = reap_pass()
        return out
