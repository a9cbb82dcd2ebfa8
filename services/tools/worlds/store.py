"""Generic copy, export and hashing of one world's rows across every world-scoped table.

Nothing here knows an app: it walks :func:`services.tools.db.world_scoped_tables` and relies
only on the convention that ``world_id`` leads each primary key. Values are turned into
canonical JSON (datetimes as UTC ISO strings, bytes as base64) so that a snapshot, a state
export and a state hash all see the same thing, whichever database holds the rows.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Date, DateTime, LargeBinary, Table, delete, insert, literal, select
from sqlalchemy.orm import Session

from services.tools.db import CORE_PREFIX, app_tables, world_scoped_tables

SNAPSHOT_FORMAT = 1
# Derived bookkeeping, rebuilt from the rest; left out of the state hash.
HASH_EXCLUDED = frozenset({"tools_row_marks"})


def encode_value(value: Any) -> Any:
    """A column value as canonical JSON."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return value


def decode_value(table: Table, column: str, value: Any) -> Any:
    """Inverse of :func:`encode_value`, guided by the column's type."""
    if value is None:
        return None
    col_type = table.c[column].type
    if isinstance(col_type, DateTime):
        return datetime.fromisoformat(value)
    if isinstance(col_type, Date):
        return date.fromisoformat(value)
    if isinstance(col_type, LargeBinary):
        return base64.b64decode(value)
    return value


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(obj: Any) -> str:
    return hashlib.sha256(canonical(obj).encode()).hexdigest()


def _pk_columns(table: Table) -> list[str]:
    return [c.name for c in table.primary_key.columns if c.name != "world_id"]


def table_rows(session: Session, table: Table, world_id: str) -> list[dict[str, Any]]:
    """The world's rows of ``table`` without ``world_id``, encoded, sorted by primary key."""
    pk = _pk_columns(table)
    stmt = select(table).where(table.c.world_id == world_id)
    stmt = stmt.order_by(*[table.c[name] for name in pk])
    out = []
    for row in session.execute(stmt).mappings():
        out.append({k: encode_value(v) for k, v in row.items() if k != "world_id"})
    return out


def dump_world(session: Session, world_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every world-scoped table's rows for this world (empty tables left out)."""
    session.flush()
    out: dict[str, list[dict[str, Any]]] = {}
    for table in world_scoped_tables():
        rows = table_rows(session, table, world_id)
        if rows:
            out[table.name] = rows
    return out


def state_hashes(tables: dict[str, list[dict[str, Any]]], clock: str) -> dict[str, str]:
    """``state_hash``: the apps' rows only (what an agent changes); ``full_hash``: everything
    that defines the world's future too (clock, events, checks, action log)."""
    apps = {k: v for k, v in tables.items() if not k.startswith(CORE_PREFIX)}
    full = {k: v for k, v in tables.items() if k not in HASH_EXCLUDED}
    return {"state_hash": digest(apps), "full_hash": digest({"clock": clock, "tables": full})}


def pack(payload: dict[str, Any]) -> bytes:
    return zlib.compress(canonical(payload).encode(), 6)


def unpack(data: bytes) -> dict[str, Any]:
    return json.loads(zlib.decompress(data))


def clear_world(session: Session, world_id: str) -> None:
    """Delete the world's rows from every world-scoped table (children first)."""
    for table in reversed(world_scoped_tables()):
        session.execute(delete(table).where(table.c.world_id == world_id))


def load_rows(session: Session, world_id: str, tables: dict[str, list[dict[str, Any]]]) -> None:
    """Insert dumped rows under ``world_id`` (after :func:`clear_world`)."""
    by_name = {t.name: t for t in world_scoped_tables()}
    unknown = sorted(set(tables) - set(by_name))
    if unknown:
        raise ValueError(f"snapshot holds tables this service does not have: {unknown}")
    for table in world_scoped_tables():
        rows = tables.get(table.name)
        if not rows:
            continue
        cols = set(table.c.keys())
        decoded = [
            {"world_id": world_id}
            | {k: decode_value(table, k, v) for k, v in row.items() if k in cols}
            for row in rows
        ]
        session.execute(insert(table), decoded)


def copy_world(session: Session, source: str, target: str) -> None:
    """Copy every row of ``source`` to ``target`` inside the database (INSERT … SELECT)."""
    for table in world_scoped_tables():
        names = [c.name for c in table.columns]
        cols = [literal(target).label("world_id") if n == "world_id" else table.c[n] for n in names]
        session.execute(
            insert(table).from_select(names, select(*cols).where(table.c.world_id == source))
        )


def row_digests(session: Session, world_id: str) -> dict[tuple[str, str], str]:
    """(table, primary-key JSON) → digest of the row, for every app row of the world."""
    out: dict[tuple[str, str], str] = {}
    for table in app_tables():
        pk = _pk_columns(table)
        for row in table_rows(session, table, world_id):
            out[(table.name, canonical([row[name] for name in pk]))] = digest(row)
    return out
