"""Rollout bookkeeping shared by the API and the workers: create a batch, start the next
iteration, the batch's view."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable

from sqlalchemy import select, update

from services.orchestrator.episode.state import EpisodeState
from services.orchestrator.episode.store import Database, EpisodeStore
from services.orchestrator.rollouts.models import RolloutRow, SampleRow, SegmentRow
from services.orchestrator.rollouts.sample import TERMINAL_PHASES, SampleDriver
from services.orchestrator.rollouts.schema import (
    PolicyVersion,
    RolloutCreate,
    RolloutIterate,
    RolloutView,
    SampleView,
    VersionSpan,
)
from shared.db import ServiceDatabase
from shared.errors import APIError
from shared.jobs import JobPolicy, JobStatus, utcnow
from shared.settings import Settings

TASK_NAME = "orchestrator.run_rollout_sample"
Enqueue = Callable[[str], None]


class SampleStore(EpisodeStore):
    """The shared job store over the samples table, with the episodes' lease timing."""

    def __init__(
        self,
        database: Database,
        settings: Settings | None = None,
        *,
        policy: JobPolicy | None = None,
    ) -> None:
        super().__init__(database, settings, policy=policy)
        self.model = SampleRow


def rollout_queue(settings: Settings | None = None) -> str:
    from shared.settings import get_settings

    return (settings or get_settings()).orchestrator.rollout_queue


def _enqueue_all(db: ServiceDatabase, ids: list[str], enqueue: Enqueue) -> None:
    store = SampleStore(db)
    for sid in ids:
        try:
            enqueue(sid)
        except Exception as exc:  # noqa: BLE001 - the row says why
            store.mark_enqueue_failed(sid, f"could not queue the sample: {exc}")


def create_rollout(db: ServiceDatabase, body: RolloutCreate, enqueue: Enqueue, queue: str) -> str:
    rid = "ro_" + uuid.uuid4().hex[:20]
    now = utcnow()
    ids = []
    with db.session() as s:
        n = len(body.tasks) * body.samples_per_task
        s.add(RolloutRow(
            id=rid, created_at=now, request=body.model_dump(mode="json"), iteration=1,
            policy={**body.policy.model_dump(mode="json"), "lam": body.lam}, pause_iteration=0,
            history=[{"iteration": 1, "version": body.policy.version, "lam": body.lam,
                      "live": n, "resumed": 0}],
        ))  # fmt: skip
        for i in range(len(body.tasks)):
            for k in range(body.samples_per_task):
                sid = f"{rid}_{i}_{k}"
                ids.append(sid)
                s.add(SampleRow(
                    id=sid, kind="rollout_sample", status=JobStatus.queued.value,
                    payload={"rollout_id": rid, "task_index": i, "k": k}, task_name=TASK_NAME,
                    queue=queue, created_at=now, progress=0.0, progress_message="queued",
                    attempts=0, rollout_id=rid, task_index=i, k=k, phase="pending",
                    iteration=1, state={}, paused={}, updated_at=now, driver=SampleDriver.name,
                ))  # fmt: skip
    _enqueue_all(db, ids, enqueue)
    return rid


def iterate(
    db: ServiceDatabase, rollout_id: str, body: RolloutIterate, enqueue: Enqueue
) -> RolloutRow:
    """Iteration n+1 under a new policy version: the paused samples resume, first; samples
    still running pause at their next tick and resume at once under the new version; queued
    ones start (or resume) under it when a worker takes them."""
    with db.session() as s:
        roll = s.get(RolloutRow, rollout_id, with_for_update=True)
        if roll is None:
            raise KeyError(rollout_id)
        samples = s.scalars(select(SampleRow).where(SampleRow.rollout_id == rollout_id)).all()
        busy = ("queued", "running")
        paused = [r for r in samples if r.phase == "paused" and r.status not in busy]
        paused.sort(key=lambda r: (bool((r.paused or {}).get("before_start")), r.updated_at))
        lam = body.lam if body.lam is not None else float(roll.request.get("lam", 1.0))
        roll.iteration += 1
        roll.policy = {**body.policy.model_dump(mode="json"), "lam": lam}
        live = len([r for r in samples if r.phase not in TERMINAL_PHASES])
        roll.history = [*(roll.history or []), {
            "iteration": roll.iteration, "version": body.policy.version, "lam": lam,
            "live": live, "resumed": len(paused),
        }]  # fmt: skip
        ids = [r.id for r in paused]
        if ids:
            s.execute(
                update(SampleRow).where(SampleRow.id.in_(ids)).values(
                    status=JobStatus.queued.value, owner=None, attempts=0, finished_at=None,
                    progress_message=f"resuming in iteration {roll.iteration}",
                )
            )  # fmt: skip
        s.flush()
        s.expunge(roll)
    _enqueue_all(db, ids, enqueue)  # the paused ones first, in the order they paused
    return roll


def cancel_samples(db: ServiceDatabase, rollout_id: str, sample_id: str | None = None) -> list[str]:
    """Cancel a rollout's unfinished samples (or one): phase ``cancelled``, job ``cancelled``.
    A running sample stops at its next tick and releases its own world and sandbox; the ids
    returned are the idle ones (queued or paused), whose resources the caller releases.
    KeyError for an unknown rollout or sample; 409 for a sample already ended."""
    now = utcnow()
    with db.session() as s:
        roll = s.get(RolloutRow, rollout_id, with_for_update=True)
        if roll is None:
            raise KeyError(rollout_id)
        query = select(SampleRow).where(SampleRow.rollout_id == rollout_id)
        if sample_id is not None:
            query = query.where(SampleRow.id == sample_id)
        rows = s.scalars(query).all()
        if sample_id is not None and not rows:
            raise KeyError(sample_id)
        if sample_id is not None and rows[0].phase in TERMINAL_PHASES:
            raise APIError(409, "sample_ended",
                           f"sample {sample_id} already ended ({rows[0].phase})")  # fmt: skip
        idle = []
        for row in rows:
            if row.phase in TERMINAL_PHASES:
                continue
            if row.status != JobStatus.running.value:
                idle.append(row.id)
            row.phase, row.status, row.updated_at = "cancelled", JobStatus.cancelled.value, now
            row.finished_at, row.progress_message = now, "cancelled"
    return idle


def version_spans(db: ServiceDatabase, sample_id: str) -> tuple[list[VersionSpan], int]:
    """Runs of completion tokens by the policy version that produced them."""
    with db.session() as s:
        rows = s.execute(
            select(SegmentRow.version, SegmentRow.completion_ids)
            .where(SegmentRow.sample_id == sample_id)
            .order_by(SegmentRow.seq)
        ).all()
    spans: list[VersionSpan] = []
    at = 0
    for version, ids in rows:
        if spans and spans[-1].version == version:
            spans[-1].end += len(ids)
        else:
            spans.append(VersionSpan(version=version, start=at, end=at + len(ids)))
        at += len(ids)
    return spans, at


def sample_view(db: ServiceDatabase, row: SampleRow) -> SampleView:
    spans, n = version_spans(db, row.id)
    state = EpisodeState.of(row.state)
    return SampleView(
        id=row.id, task_index=row.task_index, k=row.k, phase=row.phase, status=row.status,
        iteration=row.iteration, steps=state.step, reward=row.reward,
        completion_tokens=n, exit_reason=state.exit_reason, versions=spans,
        error=row.error_message,
    )  # fmt: skip


def samples_of(db: ServiceDatabase, rollout_id: str) -> list[SampleRow]:
    """A rollout's samples, detached, in (task, k) order."""
    with db.session() as s:
        rows = s.scalars(
            select(SampleRow)
            .where(SampleRow.rollout_id == rollout_id)
            .order_by(SampleRow.task_index, SampleRow.k)
        ).all()
        for r in rows:
            s.expunge(r)
        return list(rows)


def rollout_view(db: ServiceDatabase, rollout_id: str) -> RolloutView | None:
    with db.session() as s:
        roll = s.get(RolloutRow, rollout_id)
        if roll is None:
            return None
        policy = {k: v for k, v in roll.policy.items() if k != "lam"}
        out = dict(id=roll.id, iteration=roll.iteration, lam=roll.policy.get("lam", 1.0),
                   pause_iteration=roll.pause_iteration, policy=PolicyVersion(**policy))  # fmt: skip
    rows = samples_of(db, rollout_id)  # its own session (one at a time on SQLite)
    samples = [sample_view(db, r) for r in rows]
    counts = Counter(v.phase for v in samples)
    return RolloutView(**out, counts=dict(counts), samples=samples)


def reap_samples(
    db: ServiceDatabase, enqueue: Enqueue, store: SampleStore | None = None
) -> list[str]:
    """Samples whose worker died (lease lapsed) back on the queue from their last tick."""
    jobs = (store or SampleStore(db)).expire_lost()
    _enqueue_all(db, [j.id for j in jobs], enqueue)
    return [j.id for j in jobs]
