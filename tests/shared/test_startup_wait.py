"""``k3stack up`` waits for a service as long as it makes progress: a busy child (CPU time, or a
growing log) is never called stalled, an idle one is after the stall time, and the budget ends
the wait however busy the children are."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from shared.startup_wait import StartupWatch, cpu_ticks

BUSY = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass"
IDLE = "import time; time.sleep(60)"


@pytest.fixture
def child():
    procs: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        procs.append(subprocess.Popen([sys.executable, "-c", code]))
        return procs[-1]

    yield start
    for p in procs:
        p.kill()
        p.wait(10)


def _watch_until(watch: StartupWatch, procs: dict, logs: dict, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for name, p in procs.items():
            watch.look(name, p.pid, logs[name])
        time.sleep(0.1)


def test_a_busy_child_is_waited_for_and_an_idle_one_stalls(child, tmp_path):
    busy, idle = child(BUSY), child(IDLE)
    logs = {"busy": str(tmp_path / "busy.log"), "idle": str(tmp_path / "idle.log")}
    watch = StartupWatch(stall_s=3.0, budget_s=120)
    # On a loaded machine the busy child may get no CPU for a while: wait until it has some.
    deadline = time.monotonic() + 60
    while (cpu_ticks(busy.pid) or 0) < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    _watch_until(watch, {"busy": busy, "idle": idle}, logs, 5.0)
    assert watch.stalled({"busy", "idle"}) == ["idle"]
    assert not watch.over_budget()


def test_a_growing_log_is_progress(child, tmp_path):
    idle = child(IDLE)
    log = tmp_path / "svc.log"
    watch = StartupWatch(stall_s=1.0, budget_s=120)
    end = time.monotonic() + 2.5
    while time.monotonic() < end:
        with log.open("a") as fh:
            fh.write("importing...\n")
        watch.look("svc", idle.pid, str(log))
        time.sleep(0.1)
    assert watch.stalled({"svc"}) == []
    time.sleep(1.2)
    watch.look("svc", idle.pid, str(log))
    assert watch.stalled({"svc"}) == ["svc"]


def test_the_budget_ends_the_wait():
    watch = StartupWatch(stall_s=100, budget_s=0.2)
    assert not watch.over_budget()
    time.sleep(0.3)
    assert watch.over_budget()


def test_cpu_ticks_grow_for_a_busy_child(child):
    busy = child(BUSY)
    first = cpu_ticks(busy.pid)
    assert first is not None
    deadline = time.monotonic() + 60
    while cpu_ticks(busy.pid) == first and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (cpu_ticks(busy.pid) or 0) > first
