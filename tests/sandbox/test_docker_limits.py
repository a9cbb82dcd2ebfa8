"""Per-command limits on the ``docker`` runtime (issue 24): a background fork bomb fills only
its own command cgroup and a memory hog is killed in its own, so the next command still runs,
and killing the sandbox ends them and leaves no command cgroup behind. Real Docker Engine (cgroup v1 pids hierarchy here).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from services.sandbox.runtime.docker_cgroups import (
    COMMAND_OOM_SCORE_ADJ,
    PREFIX,
    container_cgroup,
    container_cgroups,
)
from services.sandbox.runtime.process.cgroups import RESERVE
from tests.sandbox.test_docker_runtime import _ensure_dockerd, create, sh
from tests.sandbox.test_fair_dataplane import BOMB, still_bombing
from tests.sandbox.waiting import eventually

pytestmark = pytest.mark.timeout(280)

PIDS_MAX = 256


def _pids(cg: Path) -> int:
    try:
        return int((cg / "pids.current").read_text())
    except OSError:
        return 0


def test_docker_fork_bomb_does_not_starve_the_next_command(service):  # type: ignore[no-untyped-def]
    _ensure_dockerd()
    svc = service("docker", guest_pids_max=PIDS_MAX)
    rt = svc.manager.runtimes["docker"]
    ok, why = rt.cgroups.available()
    assert ok, why
    c = svc.client
    sid = create(c)
    parent = container_cgroup(svc.manager.live_handle(sid).pid)
    assert parent is not None and int((parent / "pids.max").read_text()) == PIDS_MAX

    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": BOMB, "background": True})
    assert r.status_code == 200, r.text
    bombs = eventually(lambda: [cg for cg in parent.glob(f"{PREFIX}*") if _pids(cg) > 8],
                       what="the bomb's command cgroup filling")  # fmt: skip
    assert len(bombs) == 1
    bomb = bombs[0]
    assert int((bomb / "pids.max").read_text()) == PIDS_MAX - RESERVE
    eventually(lambda: _pids(bomb), lambda n: n >= PIDS_MAX - RESERVE - 4,
               what="the bomb at its own limit")  # fmt: skip
    filled = time.monotonic()

    for _ in range(3):  # the next commands each get their own cgroup and room to run
        out = sh(c, sid, "echo alive; grep pids /proc/self/cgroup")
        assert out["exit_code"] == 0 and out["stdout"].startswith("alive\n"), out
        assert PREFIX in out["stdout"] and bomb.name not in out["stdout"], out
    assert _pids(bomb) <= PIDS_MAX - RESERVE  # held at its own bound
    still_bombing(filled, lambda: _pids(bomb), PIDS_MAX - RESERVE - 4)

    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    eventually(lambda: parent.exists(), lambda e: not e, what="the container's cgroup removed")


def test_docker_memory_hog_is_killed_in_its_own_cgroup(service):  # type: ignore[no-untyped-def]
    """A command allocating more than its share (but less than the container's limit) is
    killed by the OOM killer inside its own memory cgroup, says so, and leaves the container,
    its background processes and the next command alone."""
    _ensure_dockerd()
    svc = service("docker")
    c = svc.client
    sid = create(c, memoryMB=256)
    parents = container_cgroups(svc.manager.live_handle(sid).pid)
    assert "memory" in parents, parents
    assert int((parents["memory"] / "memory.limit_in_bytes").read_text()) == 256 << 20
    bg = sh(c, sid, "sleep 600", background=True)["pid"]
    out = sh(c, sid, "grep -E ':(memory|cpu|pids):' /proc/self/cgroup")
    assert out["stdout"].count(PREFIX) == 3, out  # every command in its own three cgroups

    # 220 MiB: under the container's 256, over the command's 192
    hog = sh(c, sid, "dd if=/dev/zero of=/dev/null bs=220M count=1", timeout_s=60)
    assert hog["exit_code"] == 137, hog
    assert "out of memory (its limit is 192 MiB)" in hog["stderr"], hog
    t = time.monotonic()
    nxt = sh(c, sid, f"kill -0 {bg} && echo alive")
    assert time.monotonic() - t < 2, "the next exec took 2 s or more"
    assert nxt["stdout"] == "alive\n", nxt
    small = sh(c, sid, "dd if=/dev/zero of=/dev/null bs=100M count=1 2>/dev/null && echo ok")
    assert small["stdout"] == "ok\n", small  # within its share: runs
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    eventually(lambda: [p.exists() for p in parents.values()], lambda e: not any(e),
               what="the container's cgroups removed")  # fmt: skip


def test_docker_keepalive_is_spared_by_the_oom_killer(service):  # type: ignore[no-untyped-def]
    """When commands together fill the container's memory (a bomb's many small processes
    beside a hog), the kernel must kill one of them, not the keepalive (PID 1) whose end ends
    the sandbox: every command, however small, scores above the keepalive."""
    _ensure_dockerd()
    svc = service("docker")
    c = svc.client
    sid = create(c, memoryMB=256)
    init = svc.manager.live_handle(sid).pid
    out = sh(c, sid, "cat /proc/self/oom_score_adj")
    assert out["stdout"].strip() == str(COMMAND_OOM_SCORE_ADJ), out
    sh(c, sid, "sleep 600", background=True)  # as small as the keepalive (and its sleep 3600)
    ns = os.readlink(f"/proc/{init}/ns/pid")

    def sleeps() -> list[int]:
        out = []
        for d in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if d.name.isdigit() and os.readlink(d / "ns/pid") == ns:
                    if (d / "cmdline").read_bytes().split(b"\0")[-2:] == [b"600", b""]:
                        out.append(int(d.name))
        return out

    (small,) = eventually(sleeps, lambda p: len(p) == 1, what="the command in the container")

    def adj(pid: int) -> int:  # what the OOM killer adds to a process's badness
        return int(Path(f"/proc/{pid}/oom_score_adj").read_text())

    assert (adj(small), adj(init)) == (COMMAND_OOM_SCORE_ADJ, 0)
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
