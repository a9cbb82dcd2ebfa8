"""The episode state's journal: an append-only step record per tick, a snapshot now and then.

Each tick's transaction appends the tick's trajectory items (messages added, tool results,
clock notices: the context is rebuilt from them) and one :class:`StepRow` holding what changed
in the rest of the state (counters, cursor, pending calls, scratch) as a delta against the tick
before (a JSON Patch, RFC 6902, made and applied by ``jsonpatch``), so a tick writes what it
changed, whatever the episode's length. Rows written before the journal used JSON Patch hold
``["set", path, value]`` / ``["del", path]`` lists; they still replay. The episode row's
``state`` is a snapshot of that rest, rewritten only every :data:`SNAPSHOT_EVERY` ticks and when
the phase or the exit reason changes. The state as of the last committed tick is the snapshot
with the later records applied in order; the records are committed with the tick they describe,
so a worker killed mid-tick resumes from the tick before, exactly as the items do.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from sqlalchemy import select

from services.orchestrator.episode.models import EpisodeRow, StepRow
from services.orchestrator.episode.state import EpisodeState

SNAPSHOT_EVERY = 16
IN_ITEMS = frozenset({"messages", "scenario"})  # stored as trajectory items, not here


def journaled(state: EpisodeState) -> dict[str, Any]:
    """The part of the state the journal keeps (JSON)."""
    return state.model_dump(mode="json", exclude=IN_ITEMS)


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch operations that turn ``old`` into ``new``."""
    return jsonpatch.make_patch(old, new).patch


def patch(doc: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    """``doc`` with ``ops`` (from :func:`diff`, or a row of the older format) applied, in place."""
    if ops and isinstance(ops[0], list):
        return _patch_set_del(doc, ops)
    return jsonpatch.apply_patch(doc, ops, in_place=True)


def _patch_set_del(doc: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    """The older rows' operations: ``["set", path, value]`` and ``["del", path]``, a path a
    list of object keys."""
    for op in ops:
        *parents, last = op[1]
        node = doc
        for key in parents:
            node = node[key]
        if op[0] == "set":
            node[last] = op[2]
        else:
            node.pop(last, None)
    return doc


def replay(session: Any, row: EpisodeRow) -> tuple[dict[str, Any], int]:
    """The journaled state as of the last committed tick, and that tick."""
    doc = copy.deepcopy(row.state or {})
    tick = row.state_tick or 0
    records = session.execute(
        select(StepRow.tick, StepRow.delta)
        .where(StepRow.episode_id == row.id, StepRow.tick > tick)
        .order_by(StepRow.tick)
    ).all()
    for _, delta in records:
        doc = patch(doc, delta)
    return doc, records[-1][0] if records else tick


def current_state(session: Any, row: EpisodeRow) -> EpisodeState:
    """The episode's state now (snapshot and later records), for views and exports."""
    return EpisodeState.of(replay(session, row)[0])


class StateJournal:
    """One run's writer of the journal: it remembers the last committed journaled state, so
    each tick's record is the delta against it."""

    def __init__(self, episode_id: str, every: int = SNAPSHOT_EVERY) -> None:
        self.id = episode_id
        self.every = every
        self.tick = 0
        self.last: dict[str, Any] = {}
        self.snapshot: dict[str, Any] | None = None  # the last one written, and its tick
        self.snapshot_tick = 0
        self._written: tuple[dict[str, Any], int, bool] | None = None

    def load(self, session: Any) -> EpisodeState | None:
        """The state to resume from (None before the episode's first tick)."""
        row = session.get(EpisodeRow, self.id)
        doc, self.tick = replay(session, row)
        self.last = doc
        self.snapshot, self.snapshot_tick = (row.state or None), row.state_tick or 0
        if not doc:
            return None
        return EpisodeState.of(doc)

    def write(self, session: Any, row: EpisodeRow, state: EpisodeState, items_to: int,
              at: Any) -> None:  # fmt: skip
        """Append the tick's record (and a snapshot when one is due) in ``session``'s
        transaction; :meth:`committed` once that transaction has been committed."""
        doc = journaled(state)
        tick = self.tick + 1
        session.add(StepRow(episode_id=self.id, tick=tick, items_to=items_to, at=at,
                            delta=diff(self.last, doc)))  # fmt: skip
        snap = self.snapshot
        due = (
            snap is None
            or tick - self.snapshot_tick >= self.every
            or snap.get("phase") != doc["phase"]
            or snap.get("exit_reason") != doc["exit_reason"]
        )
        if due:
            row.state, row.state_tick = doc, tick
        self._written = (doc, tick, due)

    def committed(self) -> None:
        doc, tick, snapshot = self._written or (self.last, self.tick, False)
        self.last, self.tick = doc, tick
        if snapshot:
            self.snapshot, self.snapshot_tick = doc, tick
        self._written = None
