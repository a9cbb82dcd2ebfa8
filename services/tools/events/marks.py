"""What the agent changed: live app rows compared with the rows the scenario alone produced.

``tools_row_marks`` holds, for every app row, the digest it would have without the agent: all
rows at creation, re-marked after every event fires. The difference between live rows and
marks is the agent's footprint, per table and kind (insert / update / delete), which
collateral-damage checks compare with what the task allows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import delete, event, inspect, select
from sqlalchemy.orm import Session

from services.tools.models import RowMarkRow
from services.tools.worlds.store import row_digests

ABSENT = "-"


def mark_all(session: Session, world_id: str) -> None:
    session.execute(delete(RowMarkRow).where(RowMarkRow.world_id == world_id))
    rows = [
        {"world_id": world_id, "tbl": tbl, "pk": pk, "digest": dig}
        for (tbl, pk), dig in row_digests(session, world_id).items()
    ]
    if rows:
        from sqlalchemy import insert

        session.execute(insert(RowMarkRow), rows)


def remark(
    session: Session,
    world_id: str,
    before: dict[tuple[str, str], str],
    after: dict[tuple[str, str], str],
) -> None:
    """Re-mark the rows an event changed (``before``/``after``: digests around the event)."""
    for key in set(before) | set(after):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        mark = session.get(RowMarkRow, (world_id, key[0], key[1]))
        digest = new if new is not None else ABSENT
        if mark is None:
            session.add(RowMarkRow(world_id=world_id, tbl=key[0], pk=key[1], digest=digest))
        else:
            mark.digest = digest
    session.flush()


def agent_changes(session: Session, world_id: str) -> dict[str, dict[str, list[str]]]:
    """{table: {"insert"|"update"|"delete": [primary-key JSON, …]}} done by the agent."""
    session.flush()
    marks = {
        (m.tbl, m.pk): m.digest
        for m in session.scalars(select(RowMarkRow).where(RowMarkRow.world_id == world_id))
    }
    live = row_digests(session, world_id)
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for key in sorted(set(marks) | set(live)):
        mark, cur = marks.get(key), live.get(key)
        if mark in (None, ABSENT):
            if cur is not None:
                out[key[0]]["insert"].append(key[1])
        elif cur is None:
            out[key[0]]["delete"].append(key[1])
        elif cur != mark:
            out[key[0]]["update"].append(key[1])
    return {t: dict(kinds) for t, kinds in out.items()}


class WriteTracker:
    """Collect the app rows a block of ORM work inserts, updates or deletes (events change
    the world only through the apps' ORM models), so an event re-marks exactly its rows
    instead of digesting the whole world twice."""

    def __init__(self, session: Session) -> None:
        from services.tools.db import app_tables

        self.session = session
        self.tables = {t.name: t for t in app_tables()}
        self.keys: set[tuple[str, tuple[tuple[str, Any], ...]]] = set()

    def _collect(self, session: Session, *_: Any) -> None:
        # after_flush: the flushed objects are still listed and have their keys
        for obj in [*session.new, *session.dirty, *session.deleted]:
            state = inspect(obj)
            table = state.mapper.local_table
            if table.name in self.tables:
                cols = tuple(c.name for c in state.mapper.primary_key)
                values = tuple(state.mapper.primary_key_from_instance(obj))
                self.keys.add((table.name, tuple(zip(cols, values, strict=True))))

    def __enter__(self) -> WriteTracker:
        self.session.flush()
        event.listen(self.session, "after_flush", self._collect)
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if exc[0] is None:
                self.session.flush()
        finally:
            event.remove(self.session, "after_flush", self._collect)

    def remark(self, world_id: str) -> None:
        """Marks of the tracked rows := their digests now (ABSENT when deleted)."""
        from services.tools.worlds.store import _pk_columns, canonical, digest, encode_value

        for name, key in sorted(self.keys, key=repr):
            table = self.tables[name]
            values = dict(key)
            stmt = select(table).where(*[table.c[c] == v for c, v in values.items()])
            row = self.session.execute(stmt).mappings().first()
            pk = canonical([encode_value(values[c]) for c in _pk_columns(table)])
            if row is None:
                dig = ABSENT
            else:
                dig = digest({k: encode_value(v) for k, v in row.items() if k != "world_id"})
            mark = self.session.get(RowMarkRow, (world_id, name, pk))
            if mark is None:
                self.session.add(RowMarkRow(world_id=world_id, tbl=name, pk=pk, digest=dig))
            else:
                mark.digest = dig
        self.session.flush()
