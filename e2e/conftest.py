"""The running `make e2e` stack (scripts/e2e.sh brings it up): where each published port is, the
keys it was started with, and `docker compose` for the tests that act on containers.

Collected only by `make e2e` (pytest's testpaths is tests/): without a stack there is nothing to
test, so these fail loudly rather than skip when E2E_COMPOSE is missing.
"""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from shared.settings import SERVICE_NAMES

PORTS = {"model": 8000, "sandbox": 8001, "tools": 8002, "verifier": 8003, "orchestrator": 8004}


def compose(*args: str, timeout: float = 120) -> str:
    """Run ``docker compose`` of the e2e project (its files, env file and name) and return stdout."""
    command = os.environ.get("E2E_COMPOSE")
    assert command, "E2E_COMPOSE is not set: run the stack through `make e2e`"
    done = subprocess.run(
        [*shlex.split(command), *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"docker compose {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def urls() -> dict[str, str]:
    """service -> http://127.0.0.1:<published port> (compose publishes ephemeral ports)."""
    out = {}
    for name in SERVICE_NAMES:
        address = compose("port", name, str(PORTS[name])).strip()
        out[name] = f"http://{address}"
    return out


@pytest.fixture(scope="session")
def keys() -> dict[str, str]:
    return {name: os.environ[f"K3STACK_{name.upper()}__API_KEY"] for name in SERVICE_NAMES}
