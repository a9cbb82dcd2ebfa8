"""Suite-wide fixtures: every test gets a private data dir and fresh settings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Keep torch (imported by some areas) from fighting over the two cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Point K3STACK_DATA_DIR at a fresh folder and clear the settings cache around each test."""
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path_factory.mktemp("k3data")))
    monkeypatch.setenv("K3STACK_ENV_FILE", "/nonexistent/.env")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()
