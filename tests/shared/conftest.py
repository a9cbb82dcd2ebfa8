"""Fixtures for the tests of ``shared/``: private servers and isolated settings."""

from __future__ import annotations

import os

import pytest

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
