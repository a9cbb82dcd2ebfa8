"""Fixtures for the tests of ``shared/``: private servers and isolated settings."""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import text

from shared.db import make_engine
from shared.settings import get_settings
from tests.helpers.servers import moto_server, redis_server


@pytest.fixture(scope="session")
def moto_s3_url():
    """Endpoint (http://127.0.0.1:P) of a moto S3 server shared by the session."""
    with moto_server() as server:
        yield server.url


@pytest.fixture(scope="session")
def redis_url():
    """URL (redis://127.0.0.1:P) of a private redis-server shared by the session."""
    with redis_server() as server:
        yield server.url


PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def pg_url():
    """A throwaway database on the local PostgreSQL server (deployed-mode tests)."""
    admin = make_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    name = f"k3test_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is required for deployed-mode tests: {exc}")
    yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No K3STACK_* variable from the caller's environment or a ./.env; data dir in tmp_path.

    Yields the data dir. ``get_settings`` is cleared before and after.
    """
    for name in list(os.environ):
        if name.startswith("K3STACK_"):
            monkeypatch.delenv(name)
    data_dir = tmp_path / "data"
    monkeypatch.setenv("K3STACK_DATA_DIR", str(data_dir))
    monkeypatch.chdir(tmp_path)  # a developer's ./.env must not leak in
    get_settings.cache_clear()
    yield data_dir
    get_settings.cache_clear()
