"""The orchestrator's database handle.

On SQLite the orchestrator commits after every step of every episode, so it runs WAL with
``synchronous=NORMAL``: a committed step survives the worker being killed (what resuming
needs); only a machine crash can lose the last few, which then re-run from the journal.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event

from shared.db import ServiceDatabase

MIGRATIONS = Path(__file__).parent / "migrations"


def open_database(url: str) -> ServiceDatabase:
    db = ServiceDatabase("orchestrator", url, MIGRATIONS)
    if db.engine.dialect.name == "sqlite":

        @event.listens_for(db.engine, "connect")
        def _normal_sync(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    return db
