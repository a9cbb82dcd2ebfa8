"""Every path that ends a microVM releases its memory file and its processes (marker ``vm``).

QEMU is SIGKILLed in each state the service can find it in — running (the reaper notices),
resumed over the entry of a VM that died (resume must release the old one), dead when the
sandbox is deleted — and the service is stopped with a sandbox running. After each: the
sandbox's ``/dev/shm`` memory file is gone, the service maps it no more, and its QEMU process
is gone from the process table.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.sandbox.waiting import eventually

pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]


def create(c):  # type: ignore[no-untyped-def]
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0, "runtime": "microvm"})
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"]


def vm_of(m, sid):  # type: ignore[no-untyped-def]
    h = m.live_handle(sid)
    assert h is not None and h.pid
    return h.pid, Path(h.data["mem_path"])


def released(pid: int, mem: Path) -> None:
    assert not mem.exists(), f"{mem} left in /dev/shm"
    assert str(mem) not in Path("/proc/self/maps").read_text(), f"{mem} still mapped"
    assert not Path(f"/proc/{pid}").exists(), f"QEMU {pid} still in the process table"


def crash(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)

    def dead() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
        except FileNotFoundError:
            return True

    eventually(dead, what=f"QEMU {pid} dead")


def test_every_path_that_ends_a_vm_releases_it(service):  # type: ignore[no-untyped-def]
    svc = service("microvm")
    c, m = svc.client, svc.manager

    sid = create(c)
    assert c.post(f"/sandboxes/{sid}/exec", json={"cmd": "echo kept > /root/f"}).status_code == 200
    assert c.post(f"/sandboxes/{sid}/checkpoints").status_code == 201
    pid, mem = vm_of(m, sid)
    crash(pid)  # 1. dies while running: the reaper's liveness pass
    rt = m.runtimes["microvm"]
    eventually(lambda: not rt.is_alive(m.live_handle(sid)), what="the runtime to see it dead")
    assert m.tick()["lost"] == [sid]
    released(pid, mem)
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "paused"

    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201  # 2. over the dead entry
    r = c.get(f"/sandboxes/{sid}/files", params={"path": "/root/f"})
    assert r.content == b"kept\n"
    pid, mem = vm_of(m, sid)
    crash(pid)  # 3. dead when deleted (no tick in between)
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    released(pid, mem)

    other = create(c)
    pid, mem = vm_of(m, other)
    svc.stop()  # 4. the service stops with it running (on_shutdown: pause)
    released(pid, mem)
    c = svc.start()
    assert c.get(f"/sandboxes/{other}").json()["state"] == "paused"
    assert c.delete(f"/sandboxes/{other}").status_code == 204
