"""Kernel verifier tests: candidates live in ``candidates/<task>/``; runs use short timing."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.verifier.kernel import runner

CANDIDATES = Path(__file__).parent / "candidates"
SHORT = {"trials": 3, "iterations": 1, "warmups": 1}


@pytest.fixture(scope="session", autouse=True)
def _bwrap() -> None:
    ok, why = runner.available()
    if not ok:
        pytest.fail(f"the kernel verifier's sandbox is unavailable: {why}")


def candidate(task: str, name: str) -> Path:
    return CANDIDATES / task / f"{name}.py"
