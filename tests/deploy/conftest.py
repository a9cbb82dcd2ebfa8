"""Shared fixtures of the deployment-artefact tests (compose file, Dockerfiles, Helm chart)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def clean_k3stack_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No K3STACK_* variable of the test runner leaks into settings built by a test."""
    for name in list(os.environ):
        if name.startswith("K3STACK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("K3STACK_ENV_FILE", str(tmp_path / "absent.env"))
    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path / "data"))
    return monkeypatch
