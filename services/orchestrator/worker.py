"""The worker process's handle on the orchestrator's database, shared by the episode and the
rollout sample task bodies (neither imports the Celery app module, so there is no circle).

Opened and migrated once per process under a lock, not ``lru_cache``: a thread pool's first
tasks call it at the same time, and two Alembic upgrades at once in one process clobber each
other's context (``KeyError('script')``, the task lost and its job left ``queued``)."""

from __future__ import annotations

import threading

from shared.db import ServiceDatabase

_database: ServiceDatabase | None = None
_lock = threading.Lock()


def _open() -> ServiceDatabase:
    from services.orchestrator.db import open_database
    from shared.settings import get_settings

    return open_database(get_settings().database_url or "")


def worker_database() -> ServiceDatabase:
    """The process's database handle, migrated on first use."""
    global _database
    if _database is None:
        with _lock:
            if _database is None:
                db = _open()
                db.migrate()
                _database = db
    return _database


def migrate_once() -> None:
    """Bring the tables to head with a handle of its own, closed after (a prefork pool's
    children, forked later, then each open their own)."""
    db = _open()
    try:
        with _lock:
            db.migrate()
    finally:
        db.close()
