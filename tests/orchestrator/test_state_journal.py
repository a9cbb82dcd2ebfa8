"""The episode state's journal: a tick writes its record, not the whole state, so what a tick
writes does not grow with the episode; the state replayed from the journal (snapshot and later
records) equals the live one after every tick; the typed state refuses keys it does not
declare."""

from __future__ import annotations

import copy
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from sqlalchemy import event, select

from services.orchestrator.episode.journal import (
    SNAPSHOT_EVERY,
    StateJournal,
    current_state,
    diff,
    journaled,
    patch,
)
from services.orchestrator.episode.models import EpisodeRow, StepRow
from services.orchestrator.episode.policy import ScriptedPolicy, Turn, View
from services.orchestrator.episode.recorder import EpisodeRecorder
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.service import create_episode
from services.orchestrator.episode.state import EpisodeState
from shared.contracts.orchestrator import EpisodeCreate
from tests.orchestrator.test_trajectory_fields import local_services


def _body(steps: int) -> EpisodeCreate:
    return EpisodeCreate.model_validate(
        {"task": {"instruction": "keep the list"}, "harness": "claude-code",
         "budgets": {"max_steps": steps, "steps_per_day": steps + 1}}
    )  # fmt: skip


def working(view: View) -> Turn:
    """A tool call every step, the todo list the same size (what a tick writes stays so)."""
    todo = f'{{"todos": [{{"content": "item {view.step % 7}", "status": "pending", ' \
           f'"activeForm": "doing it"}}]}}'  # fmt: skip
    return Turn(tool_calls=[{"id": f"t{view.step}", "name": "TodoWrite", "arguments": todo}],
                usage={"prompt_tokens": 10, "completion_tokens": 3})  # fmt: skip


def test_diff_then_patch_gives_the_new_document() -> None:
    old = {"a": 1, "b": {"c": [1, 2], "d": {"e": "x"}, "gone": 1}, "f": None, "drop": {"z": 1}}
    new = {"a": 2, "b": {"c": [1, 2, 3], "d": {"e": "x", "g": 0}}, "f": {"h": 1}}
    ops = diff(old, new)
    assert all(op["op"] in ("add", "remove", "replace", "move", "copy") for op in ops)
    assert patch(copy.deepcopy(old), json.loads(json.dumps(ops))) == new  # as the row stores it
    assert diff(new, new) == []


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=5), JSON, max_size=5),
       st.dictionaries(st.text(max_size=5), JSON, max_size=5))  # fmt: skip
def test_any_two_documents_round_trip(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert patch(copy.deepcopy(old), json.loads(json.dumps(diff(old, new)))) == new


def test_rows_of_the_older_format_still_replay() -> None:
    """A journal written before JSON Patch: its ``set``/``del`` rows, then newer rows."""
    doc = {"step": 3, "cursor": {"day": 1, "at": "x"}, "scratch": {"k": 1}}
    older = [["set", ["step"], 4], ["set", ["cursor", "day"], 2], ["del", ["scratch", "k"]]]
    doc = patch(doc, older)
    assert doc == {"step": 4, "cursor": {"day": 2, "at": "x"}, "scratch": {}}
    newer = diff(doc, {"step": 5, "cursor": {"day": 2}, "scratch": {"n": [1]}})
    assert patch(doc, newer) == {"step": 5, "cursor": {"day": 2}, "scratch": {"n": [1]}}


def test_the_state_refuses_undeclared_keys() -> None:
    with pytest.raises(ValidationError, match="tools_recorded_twice"):
        EpisodeState.of({"step": 1, "tools_recorded_twice": True})
    with pytest.raises(ValidationError):
        EpisodeState.of({"phase": "halfway"})


def _writes_per_tick(orch_db: Any, tmp_path: Path, steps: int) -> tuple[list[int], int, int]:
    """Bytes each tick's transaction sends to the database (parameters of its INSERTs and
    UPDATEs), the number of state snapshots written and the number of ticks."""
    txn: dict[str, int] = defaultdict(int)
    ticks: list[int] = []
    snapshots = [0]

    def on_execute(conn, cursor, statement, params, context, executemany) -> None:  # noqa: ANN001
        if not statement.startswith(("INSERT", "UPDATE")):
            return
        rows = params if executemany else [params]
        for p in rows:
            values = p.values() if isinstance(p, dict) else p
            txn["bytes"] += sum(len(str(v)) for v in values if v is not None)
        if statement.startswith("INSERT INTO orchestrator_episode_steps"):
            txn["tick"] = 1
        if statement.startswith("UPDATE orchestrator_episodes") and " state=" in statement:
            snapshots[0] += 1

    def on_commit(conn) -> None:  # noqa: ANN001
        if txn.pop("tick", 0):
            ticks.append(txn["bytes"])
        txn.clear()

    event.listen(orch_db.engine, "before_cursor_execute", on_execute)
    event.listen(orch_db.engine, "commit", on_commit)
    try:
        episode_id = create_episode(orch_db, _body(steps), lambda _id: None)
        EpisodeRunner(orch_db, local_services(tmp_path), episode_id,
                      policy=ScriptedPolicy(working)).run()  # fmt: skip
    finally:
        event.remove(orch_db.engine, "before_cursor_execute", on_execute)
        event.remove(orch_db.engine, "commit", on_commit)
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        assert row.status == "succeeded", row.error_message
        assert row.state["step"] == steps and row.state["exit_reason"] == "max_steps"
        n = s.scalar(select(StepRow.tick).where(StepRow.episode_id == episode_id)
                     .order_by(StepRow.tick.desc()).limit(1))  # fmt: skip
    assert n == len(ticks)
    return ticks, snapshots[0], n


@pytest.mark.slow
def test_what_a_tick_writes_does_not_grow_with_the_episode(orch_db, tmp_path: Path) -> None:
    short, _, _ = _writes_per_tick(orch_db, tmp_path, 12)
    long, snapshots, ticks = _writes_per_tick(orch_db, tmp_path, 120)
    assert ticks >= 120
    # the first two ticks write the setup (prompt, task, tool schemas, the whole state); after
    # them a tick late in the long episode writes what one early in it, or in the short
    # episode, does (a few bytes for wider numbers aside)
    early, late = long[2 : ticks // 2], long[ticks // 2 :]
    assert max(late) <= max(early) + 64, (max(late), max(early))
    assert statistics.median(late) <= statistics.median(short[2:]) + 64, (late, short)
    # the state itself is rewritten only every SNAPSHOT_EVERY ticks (and at phase changes)
    assert 2 <= snapshots <= ticks // SNAPSHOT_EVERY + 4, (snapshots, ticks)


class Checked:
    """After every committed tick, the state replayed from the database (by a fresh reader,
    as a resuming worker would) is compared with the live one: a wrapper of the recorder's
    public ``persist``."""

    def __init__(self, orch_db) -> None:  # noqa: ANN001
        self.db = orch_db
        self.mismatches: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
        self.checked = 0
        self.tick = 0

    def wrap(self, persist):  # noqa: ANN001, ANN201
        def checked(recorder: EpisodeRecorder, state: EpisodeState) -> None:
            persist(recorder, state)
            with self.db.session() as s:
                replayed = StateJournal(recorder.id).load(s)
                viewed = current_state(s, s.get(EpisodeRow, recorder.id))
            live = journaled(state)
            self.tick = recorder.journal.tick
            for other in (journaled(replayed), journaled(viewed)):
                if other != live:
                    self.mismatches.append((recorder.journal.tick, other, live))
            self.checked += 1

        return checked


def test_the_state_replayed_from_the_journal_equals_the_live_one(
    orch_db, tmp_path, monkeypatch
) -> None:
    failing = {"left": 1}

    def policy(view: View) -> Turn:
        if view.step == 5 and failing["left"]:  # one failed call: the failure counters move
            failing["left"] -= 1
            raise RuntimeError("the endpoint is down")
        if view.step >= 2 * SNAPSHOT_EVERY:
            return Turn(content="All done.", usage={"prompt_tokens": 5, "completion_tokens": 2})
        return working(view)

    episode_id = create_episode(orch_db, _body(100), lambda _id: None)
    runner = Checked(orch_db)
    monkeypatch.setattr(EpisodeRecorder, "persist", runner.wrap(EpisodeRecorder.persist))
    EpisodeRunner(orch_db, local_services(tmp_path), episode_id, ScriptedPolicy(policy)).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        assert row.status == "succeeded", row.error_message
        final = current_state(s, row)
        assert row.state_tick == runner.tick  # the last phase change: a snapshot
    assert runner.checked > 2 * SNAPSHOT_EVERY
    assert not runner.mismatches, runner.mismatches[:1]
    assert final.exit_reason == "completed" and final.phase == "done"
    assert final.step == 2 * SNAPSHOT_EVERY + 1 and final.scratch["todos"]
