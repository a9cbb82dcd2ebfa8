"""SQLAlchemy 2.0 engine/session factory and per-service Alembic migrations.

SQLite under the data dir by default (WAL, foreign keys, busy timeout so several processes —
a service and its Celery workers — can share it); PostgreSQL by URL.

Migrations: each service owns its tables and its migration history. A service keeps
``services/<name>/migrations/`` (an ``env.py`` that calls :func:`run_migrations_env` and a
``versions/`` folder) and calls :func:`migrate` at start-up. Each history records its head in
its own version table, ``alembic_version_<service>``, so five services can share one database
without stepping on each other's revisions. New revision::

    alembic -x service=tools revision -m "add x"   # see docs/architecture.md ("Migrations")
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, Engine, TypeDecorator, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker


class Base(DeclarativeBase):
    """Declarative base; each service subclasses it with its own metadata (see ``service_base``)."""


def service_base() -> type[DeclarativeBase]:
    """A fresh declarative base with its own MetaData, so one service's tables stay its own."""

    class _Base(DeclarativeBase):
        pass

    return _Base


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine; SQLite files get their folder, WAL and a busy timeout."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        connect_args = kwargs.pop("connect_args", {})
        connect_args.setdefault("check_same_thread", False)
        connect_args.setdefault("timeout", 30)
        engine = create_engine(url, connect_args=connect_args, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
            # Let SQLAlchemy, not the driver, open transactions (see _begin_immediate).
            dbapi_conn.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin_immediate(conn):  # type: ignore[no-untyped-def]
            # A deferred transaction that reads and then writes fails with "database is
            # locked" when another writer got there first; taking the write lock up front
            # makes concurrent writers queue on the busy timeout instead.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _alembic_config(  # type: ignore[no-untyped-def]
    engine: Engine, migrations_dir: Path, service: str, version_dirs: Sequence[Path] = ()
):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir))
    cfg.set_main_option("path_separator", "os")
    locations = [migrations_dir / "versions", *version_dirs]
    cfg.set_main_option("version_locations", os.pathsep.join(str(p) for p in locations))
    cfg.attributes["engine"] = engine
    cfg.attributes["version_table"] = f"alembic_version_{service}"
    return cfg


def migrate(
    engine: Engine,
    migrations_dir: Path,
    service: str,
    revision: str = "heads",
    version_dirs: Sequence[Path] = (),
) -> None:
    """Upgrade one service's tables to ``revision`` (idempotent). ``version_dirs`` are more
    folders of revisions in the same history (the tools service's apps keep theirs at home).

    Several replicas may start at once: on PostgreSQL they queue on an advisory lock keyed by
    the service name; on SQLite the busy timeout serialises them. Within one process, Alembic's
    migration context is a module global: two upgrades at once (a thread pool's first tasks)
    clobber each other's (``KeyError('config')``/``'script'``, the task lost), so every upgrade
    in a process takes ``_MIGRATE_LOCK`` first.
    """
    with _MIGRATE_LOCK:
        _upgrade(engine, migrations_dir, service, revision, version_dirs)


_MIGRATE_LOCK = threading.Lock()


def _upgrade(
    engine: Engine,
    migrations_dir: Path,
    service: str,
    revision: str,
    version_dirs: Sequence[Path],
) -> None:
    from alembic import command

    cfg = _alembic_config(engine, migrations_dir, service, version_dirs)
    if engine.dialect.name != "postgresql":
        command.upgrade(cfg, revision)
        return
    from sqlalchemy import text

    key = int.from_bytes(
        hashlib.sha256(f"k3stack:{service}".encode()).digest()[:8], "big", signed=True
    )
    with engine.connect() as lock_conn:
        lock_conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            command.upgrade(cfg, revision)
        finally:
            lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            lock_conn.commit()


def current_revision(engine: Engine, service: str) -> str | None:
    """The applied head(s) of a service's history, comma-joined (apps branch off one root)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": f"alembic_version_{service}"})
        heads = sorted(ctx.get_current_heads())
        return ",".join(heads) if heads else None


def run_migrations_env() -> None:
    """Body of every service's ``migrations/env.py`` (online mode only)."""
    from alembic import context

    cfg = context.config
    engine: Engine | None = cfg.attributes.get("engine")
    version_table = cfg.attributes.get("version_table") or "alembic_version"
    if engine is None:  # invoked from the alembic CLI
        from shared.settings import get_settings

        engine = make_engine(get_settings().database_url or "")
        service = cfg.get_main_option("service") or "k3stack"
        version_table = f"alembic_version_{service}"
    with engine.begin() as conn:
        context.configure(
            connection=conn,
            version_table=version_table,
            render_as_batch=conn.dialect.name == "sqlite",
        )
        context.run_migrations()


class ServiceDatabase:
    """A service's handle on the database: engine, sessions, and its migrations applied once.

    Built in the service's lifespan (never at import) and passed to routes through
    ``app.state.db``.
    """

    def __init__(
        self, service: str, url: str, migrations_dir: Path, version_dirs: Sequence[Path] = ()
    ) -> None:
        self.service = service
        self.engine = make_engine(url)
        self.sessions = make_session_factory(self.engine)
        self.migrations_dir = migrations_dir
        self.version_dirs = tuple(version_dirs)

    def migrate(self) -> None:
        migrate(self.engine, self.migrations_dir, self.service, version_dirs=self.version_dirs)

    def session(self):  # type: ignore[no-untyped-def]
        """``with db.session() as s:`` commits on success, rolls back on error."""
        return session_scope(self.sessions)

    def ping(self) -> dict[str, str]:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return {"dialect": self.engine.dialect.name, "revision": str(self.revision())}

    def revision(self) -> str | None:
        return current_revision(self.engine, self.service)

    def close(self) -> None:
        self.engine.dispose()


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL keeps ``timestamptz``; SQLite has no time zones and would hand back naive
    values, so they are stored as naive UTC and read back with ``tzinfo=UTC``. Stored strings
    then compare in time order, which lets queries filter on them (``heartbeat_at < cutoff``).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware one (UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
