"""``k3stack up`` on a busy machine, with its default settings: two CPU burners per core for the
whole start-up, every service healthy, then a worker SIGKILLed is restarted and the stack stays up.

Why a test of its own: start-up waits that were constants (60 s for health) tore the stack down
whenever the model process alone took a minute to import; the defaults must follow the machine.
The burners run at normal priority (not niced) so the load is real; they live only as long as this
test, and the file runs on its own xdist worker (``--dist loadfile``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.cli import group_alive
from tests.contract.test_up import (
    SERVICES,
    _processes_mentioning,
    _start_foreground,
    _wait_for_line,
    k3stack,
)
from tests.helpers.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

# `k3stack up`'s own defaults bound start-up (600 s budget, 120 s without progress); the test's
# waits sit above them so that up, not the test, decides whether start-up failed.
UP_BUDGET_S = 600 + 60


@pytest.fixture
def burners() -> Iterator[int]:
    """Two busy-looping processes per core, killed when the test ends, however it ends."""
    count = 2 * (os.cpu_count() or 1)
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield count
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def default_env(tmp_path) -> Iterator[tuple[dict[str, str], dict[str, int]]]:
    """Default settings except where a test must be private: its data dir and free ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env["K3STACK_DATA_DIR"] = str(tmp_path / "data")
    ports = {name: free_port() for name in SERVICES}
    for name, port in ports.items():
        env[f"K3STACK_{name.upper()}__PORT"] = str(port)
    yield env, ports
    k3stack("down", env=env, timeout=120)


def test_up_with_defaults_under_two_burners_per_core(burners, default_env):
    env, ports = default_env
    assert burners >= 2
    # all services, no --timeout: the defaults under test
    proc, lines = _start_foreground(env, "--services", ",".join(SERVICES))
    try:
        _wait_for_line(lines, "press Ctrl-C to stop", timeout=UP_BUDGET_S)
        for name, port in ports.items():
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).json()
            assert health["status"] == "ok" and health["service"] == name

        # A worker killed under load comes back; nothing else is restarted.
        state_file = Path(env["K3STACK_DATA_DIR"]) / "run" / "state.json"
        before = {c["name"]: c["pid"] for c in json.loads(state_file.read_text())["children"]}
        worker = next(n for n in before if n.startswith("orchestrator-worker"))
        os.killpg(before[worker], signal.SIGKILL)
        _wait_for_line(lines, f"restarted {worker}", timeout=120)
        after = {c["name"]: c["pid"] for c in json.loads(state_file.read_text())["children"]}
        assert after[worker] != before[worker] and group_alive(after[worker])
        assert {n: p for n, p in after.items() if n != worker} == {
            n: p for n, p in before.items() if n != worker
        }
        for port in ports.values():
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200

        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)  # 10 s grace then SIGKILL by design; the rest is slack for load
    finally:
        proc.kill()
    assert proc.returncode == 0, proc.stderr.read()
    deadline = time.monotonic() + 30
    while _processes_mentioning(env["K3STACK_DATA_DIR"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_mentioning(env["K3STACK_DATA_DIR"]) == []
