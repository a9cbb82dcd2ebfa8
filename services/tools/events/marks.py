"""What the agent changed: live app rows compared with the rows the scenario alone produced.

``tools_row_marks`` holds, for every app row, the digest it would have without the agent: all
rows at creation, re-marked after every event fires. The difference between live rows and
marks is the agent's footprint, per table and kind (insert / update / delete), which
collateral-damage checks compare with what the task allows.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import delete, select
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
