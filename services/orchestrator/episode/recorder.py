"""What every episode driver writes, in one public object: the run's trajectory items, its
per-tick commit (items, the state journal's record, progress, heartbeat), the leases of its
world and sandbox, and its end (score, job status, artefacts).

SQL is the source of truth: after every tick the new trajectory items (the context), the tick's
record in the state's journal (what changed in the counters, cursor, pending calls; a snapshot
every few ticks: :mod:`~services.orchestrator.episode.journal`), the progress and the heartbeat
are committed together, on the condition that the episode is still this run's (``running``
under its owner), so a cancelled or taken-over episode stops at its next tick.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from services.orchestrator.episode.journal import StateJournal
from services.orchestrator.episode.loop import World
from services.orchestrator.episode.models import EpisodeRow, ToolCallRow, TrajectoryItemRow
from services.orchestrator.episode.platform import Services
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.state import EpisodeState
from services.orchestrator.episode.stop import Outcome
from services.orchestrator.episode.store import EpisodeStore, now_utc
from services.orchestrator.harness.config import HarnessConfig, load_harness
from shared.db import ServiceDatabase
from shared.jobs import JobCancelled, JobRun

log = logging.getLogger("k3stack.orchestrator")
ItemBody = dict[str, object]  # a trajectory item's JSON body
Item = tuple[str, ItemBody, datetime, int]


class SQLJournal:
    """The side-effecting tool calls of a run, by idempotency key (the loop's journal)."""

    def __init__(self, db: ServiceDatabase, episode_id: str) -> None:
        self.db = db
        self.episode_id = episode_id

    def get(self, key: str) -> dict[str, Any] | None:
        with self.db.session() as s:
            row = s.get(ToolCallRow, key)
            if row is None:
                return None
            return {
                "status": row.status,
                "pre_hash": row.pre_hash,
                "observation": row.observation,
                "is_error": row.is_error,
                "runs": row.runs,
            }

    def start(self, key: str, tool: str, effect: str, pre_hash: str | None) -> None:
        with self.db.session() as s:
            row = s.get(ToolCallRow, key)
            if row is None:
                row = ToolCallRow(
                    key=key, episode_id=self.episode_id, tool=tool, effect=effect,
                    status="started", started_at=now_utc(), runs=0, is_error=False,
                )  # fmt: skip
                s.add(row)
            row.status, row.pre_hash = "started", pre_hash
            row.runs += 1

    def finish(self, key: str, observation: str, is_error: bool) -> None:
        with self.db.session() as s:
            row = s.get(ToolCallRow, key)
            row.status, row.observation, row.is_error = "done", observation, is_error


def stored_harness(db: ServiceDatabase, episode_id: str) -> HarnessConfig | None:
    """The harness stored with the episode (its ``harness`` item), if it has one yet."""
    with db.session() as s:
        body = s.scalars(
            select(TrajectoryItemRow.body).where(
                TrajectoryItemRow.episode_id == episode_id, TrajectoryItemRow.kind == "harness"
            )
        ).first()
    return None if body is None else HarnessConfig.model_validate(body["harness"])


class EpisodeRecorder:
    """One run's writes to its episode, shared by every episode driver."""

    def __init__(self, db: ServiceDatabase, services: Services, job: JobRun) -> None:
        self.db = db
        self.svc = services
        self.id = job.id
        self.owner = job.owner
        self.attempt = job.attempt
        self.store = EpisodeStore(db, services.settings)
        self.journal = StateJournal(job.id)
        self.items: list[Item] = []
        self.seq: int | None = None
        self.segment = 0
        self.max_steps = 1  # progress is step / max_steps

    # -- reading -------------------------------------------------------------------------------

    def request(self) -> EpisodeCreate:
        with self.db.session() as s:
            return EpisodeCreate.model_validate(s.get(EpisodeRow, self.id).request)

    def load_state(self) -> EpisodeState | None:
        """The state as of the last committed tick (None before the first)."""
        with self.db.session() as s:
            state = self.journal.load(s)
        if state is not None:
            self.segment = state.segment
        self.emit("attempt", {"attempt": self.attempt})  # the report marks each start
        return state

    def harness(self, request: EpisodeCreate) -> HarnessConfig:
        """The harness stored with the episode (at submit, or at its first start, so every
        resume runs the configuration it started with), the request's budgets applied."""
        harness = stored_harness(self.db, self.id)
        if harness is None:
            harness = load_harness(request.harness, self.svc.settings.data_dir)
            self.emit("harness", {"harness": harness.model_dump(mode="json")})
        for k, v in request.budgets.model_dump(exclude_none=True).items():
            setattr(harness.budgets, k, v)
        return harness

    # -- writing -------------------------------------------------------------------------------

    def emit(self, kind: str, body: ItemBody) -> None:
        """An item, stamped with the time it happened and the segment it belongs to (a
        compaction item opens the segment it names); written by the next :meth:`persist`."""
        opens = body.get("segment_to")
        if isinstance(opens, int):
            self.segment = opens
        self.items.append((kind, body, now_utc(), self.segment))

    def lease(self, *, world_id: str | None = None, sandbox_id: str | None = None) -> None:
        """Record the run's world or sandbox on the episode (released when it ends)."""
        with self.db.session() as s:
            row = s.get(EpisodeRow, self.id)
            if world_id is not None:
                row.world_id = world_id
            if sandbox_id is not None:
                row.sandbox_id = sandbox_id

    def persist(self, state: EpisodeState) -> None:
        """One transaction per tick: the new trajectory items, the tick's journal record (the
        context itself is rebuilt from the items on resume), the progress and the heartbeat.
        Raises :class:`JobCancelled` (nothing written) once the episode is no longer this
        run's: cancelled, or taken over after a lost heartbeat."""
        now = now_utc()
        with self.db.session() as s:
            row = s.get(EpisodeRow, self.id)
            if row.status != "running" or row.owner != self.owner:
                raise JobCancelled(self.id)
            if self.seq is None:
                last = s.scalars(
                    select(TrajectoryItemRow.seq)
                    .where(TrajectoryItemRow.episode_id == self.id)
                    .order_by(TrajectoryItemRow.seq.desc())
                    .limit(1)
                ).first()
                self.seq = last or 0
            seq = self.seq + 1
            for kind, body, at, segment in self.items:
                s.add(
                    TrajectoryItemRow(
                        episode_id=self.id, seq=seq, segment=segment,
                        kind=kind, at=at, body=json.loads(json.dumps(body, default=str)),
                    )
                )  # fmt: skip
                seq += 1
            self.seq = seq - 1
            self.items.clear()
            self.journal.write(s, row, state, self.seq, now)
            row.heartbeat_at = row.updated_at = now
            row.progress = min(1.0, state.step / max(1, self.max_steps))
            row.progress_message = f"step {state.step}, day {state.day}"
        self.journal.committed()

    def score_and_finish(self, state: EpisodeState, world: World | None) -> None:
        """Score the world (when the run's outcome is scored), then end the job in the status
        its outcome maps to (:mod:`~services.orchestrator.episode.stop`), the outcome named."""
        reason = Outcome.of(state.exit_reason)
        result: dict[str, Any] = {"exit_reason": reason.value, "exit_detail": state.exit_detail}
        reward = None
        if world is not None and reason.scored:
            reward = self._score(world.id, result)
        self.emit("score", {"reward": reward, **result})
        state.phase = "done"
        self.persist(state)
        with self.db.session() as s:
            s.execute(
                update(EpisodeRow)
                .where(EpisodeRow.id == self.id, EpisodeRow.owner == self.owner)
                .values(reward=reward, updated_at=now_utc())
            )
        if reason.failed:  # scored, but a failed job: it says why
            detail = state.exit_detail or reason.value
            if not self.store.fail(self.id, self.owner, reason.value, str(detail)[:2000]):
                raise JobCancelled(self.id)
            with self.db.session() as s:
                s.execute(update(EpisodeRow).where(EpisodeRow.id == self.id).values(result=result))
        elif not self.store.succeed(self.id, self.owner, result, None):
            raise JobCancelled(self.id)
        self._write_artifacts()

    def _score(self, world_id: str, result: dict[str, Any]) -> float:
        checks = self.svc.tools.checks(world_id).model_dump(mode="json")
        world_state = self.svc.tools.state(world_id, tables=False).model_dump(mode="json")
        total = checks["events_total"] or 0
        result.update(
            events_total=total,
            events_passed=checks["events_passed"],
            checks_total=checks["checks_total"],
            checks_passed=checks["checks_passed"],
            events=[
                {k: e.get(k) for k in ("event_id", "title", "status", "passed", "checks")}
                for e in checks["events"]
            ],
            judge_checks=len(checks.get("judge_checks", [])),
            state_hash=world_state.get("state_hash"),
            full_hash=world_state.get("full_hash"),
        )
        return checks["events_passed"] / total if total else 0.0

    def _write_artifacts(self) -> None:
        from services.orchestrator.episode.export import write_artifacts

        try:
            location = write_artifacts(self.db, self.svc, self.id)
        except Exception:  # noqa: BLE001 - the episode is scored even if the artefacts fail
            log.exception("episode %s: writing trajectory/report failed", self.id)
            return
        with self.db.session() as s:
            s.get(EpisodeRow, self.id).result_location = location
