"""Per-service migrations on SQLite and on the real PostgreSQL of this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from shared.db import ServiceDatabase

REPO = Path(__file__).resolve().parents[2]
VERIFIER = REPO / "services/verifier/migrations"
TOOLS = REPO / "services/tools/migrations"
INSERT_JOB = (
    "INSERT INTO verifier_jobs (id, kind, status, payload, task_name, created_at, progress,"
    " progress_message, attempts)"
    " VALUES (:id, 'echo', 'queued', '{}', 'verifier.echo', CURRENT_TIMESTAMP, 0, '', 0)"
)


def _head(migrations) -> str:
    """The verifier history's head revision, read from its scripts (new migrations move it)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations))
    return ScriptDirectory.from_config(cfg).get_current_head()


def _check_two_services_share_one_database(url: str) -> None:
    verifier = ServiceDatabase("verifier", url, VERIFIER)
    tools = ServiceDatabase("tools", url, TOOLS)
    verifier.migrate()
    tools.migrate()
    tools.migrate()  # idempotent
    names = set(inspect(verifier.engine).get_table_names())
    assert {"verifier_jobs", "tools_worlds", "tools_actions"} <= names
    # Each history records its own head in its own version table.
    assert {"alembic_version_verifier", "alembic_version_tools"} <= names
    assert verifier.revision() == _head(VERIFIER)
    assert tools.revision() is not None and tools.revision() != verifier.revision()
    assert verifier.ping()["dialect"] == verifier.engine.dialect.name
    verifier.close()
    tools.close()


def test_migrations_on_sqlite(tmp_path):
    _check_two_services_share_one_database(f"sqlite:///{tmp_path / 'nested' / 'k3.db'}")


def test_migrations_on_postgresql(pg_url):
    _check_two_services_share_one_database(pg_url)


def test_session_rolls_back_on_error(tmp_path):
    db = ServiceDatabase("verifier", f"sqlite:///{tmp_path / 'k3.db'}", VERIFIER)
    db.migrate()
    with pytest.raises(RuntimeError):
        with db.session() as s:
            s.execute(text(INSERT_JOB), {"id": "a"})
            raise RuntimeError("abort")
    with db.session() as s:
        assert s.execute(text("SELECT count(*) FROM verifier_jobs")).scalar() == 0


def test_concurrent_migrations_on_postgresql(pg_url):
    """Replicas starting together: the advisory lock makes them take turns."""
    from concurrent.futures import ThreadPoolExecutor

    dbs = [ServiceDatabase("verifier", pg_url, VERIFIER) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda db: db.migrate(), dbs))
    assert dbs[0].revision() == _head(VERIFIER)
    for db in dbs:
        db.close()


def test_concurrent_migrations_in_one_process_on_sqlite(tmp_path):
    """A thread pool's first tasks each open and migrate at once (the verifier's web worker):
    Alembic's context is process-global, so unserialised upgrades clobbered each other
    (``KeyError('config')``, the task lost and its job left ``queued``)."""
    from concurrent.futures import ThreadPoolExecutor

    url = f"sqlite:///{tmp_path / 'k3.db'}"
    dbs = [ServiceDatabase("verifier", url, VERIFIER) for _ in range(4)]
    dbs += [ServiceDatabase("tools", f"sqlite:///{tmp_path / 't.db'}", TOOLS) for _ in range(2)]
    with ThreadPoolExecutor(len(dbs)) as pool:
        list(pool.map(lambda db: db.migrate(), dbs))  # re-raises any thread's error
    assert dbs[0].revision() == _head(VERIFIER)
    assert dbs[-1].revision() is not None
    for db in dbs:
        db.close()


def test_read_modify_write_on_sqlite_is_serialised(tmp_path):
    """Each transaction derives its row id from a count it read: without a transaction that
    takes the write lock up front, two threads read the same count and collide."""
    from concurrent.futures import ThreadPoolExecutor

    db = ServiceDatabase("verifier", f"sqlite:///{tmp_path / 'k3.db'}", VERIFIER)
    db.migrate()

    def work(_: int) -> None:
        with db.session() as s:
            n = s.execute(text("SELECT count(*) FROM verifier_jobs")).scalar()
            s.execute(
                text(INSERT_JOB),
                {"id": f"j{n}"},
            )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(40)))
    with db.session() as s:
        ids = s.execute(text("SELECT id FROM verifier_jobs")).scalars().all()
    assert sorted(ids) == sorted(f"j{i}" for i in range(40))
    db.close()
