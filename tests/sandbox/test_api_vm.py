"""Acceptance of issue 3 through the API on real QEMU microVMs (marker ``vm``).

These run in CI and are never skipped: on a host without QEMU or the guest kernel they fail,
saying to run ``scripts/setup_sandbox.sh``. The busybox image keeps them fast; the 100-cycle
test dominates, so pause/resume speed matters.
"""

from __future__ import annotations

import pytest

from tests.sandbox.waiting import COUNTER, eventually

pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]

MEM_MB = 256


@pytest.fixture
def vm(service):  # type: ignore[no-untyped-def]
    svc = service("microvm")
    infos = {r["name"]: r for r in svc.client.get("/runtimes").json()}
    mv = infos.get("microvm")
    if not mv or not mv["available"]:
        why = mv["reason"] if mv else "runtime not installed"
        pytest.fail(f"microvm runtime unavailable ({why}): run scripts/setup_sandbox.sh")
    return svc


def create(c, **body):  # type: ignore[no-untyped-def]
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0, "memoryMB": MEM_MB,
                                   "runtime": "microvm", **body})  # fmt: skip
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"]


def count(c, sid, above: int) -> int:  # type: ignore[no-untyped-def]
    """The in-guest counter once it is past ``above`` (waits for it, generously)."""

    def read() -> int:
        r = c.get(f"/sandboxes/{sid}/files", params={"path": "/tmp/count"})
        return int(r.text) if r.status_code == 200 and r.text.strip() else 0

    return eventually(read, lambda n: n > above, what=f"/tmp/count of {sid} above {above}")


def sh(c, sid, cmd, **kw):  # type: ignore[no-untyped-def]
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def _gone(pid: int | None) -> bool:
    if not pid:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def test_pause_resume_keeps_files_and_processes(vm):  # type: ignore[no-untyped-def]
    c, m = vm.client, vm.manager
    sid = create(c)
    assert c.get(f"/sandboxes/{sid}").json()["memory_checkpoint"] is True
    assert sh(c, sid, "echo hello")["stdout"] == "hello\n"
    c.put(f"/sandboxes/{sid}/files", params={"path": "/root/f.txt"}, content=b"kept")
    bg = sh(c, sid, COUNTER, background=True)
    count(c, sid, above=1)
    pid_before = m.live_handle(sid).pid
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    assert _gone(pid_before), "the VM process is gone while paused"
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "/root/f.txt"}).content == b"kept"
    n1 = count(c, sid, above=1)
    count(c, sid, above=n1)  # the background process continues counting
    assert sh(c, sid, f"kill -0 {bg['pid']} && echo alive")["stdout"] == "alive\n"


def test_hundred_pause_resume_cycles(vm):  # type: ignore[no-untyped-def]
    c = vm.client
    sid = create(c)
    for i in range(100):
        sh(c, sid, f"echo {i} >> /root/log")
        assert c.post(f"/sandboxes/{sid}/pause").status_code == 204, i
        assert c.post(f"/sandboxes/{sid}/resume").status_code == 201, i
    lines = c.get(f"/sandboxes/{sid}/files", params={"path": "/root/log"}).text.split()
    assert lines == [str(i) for i in range(100)]
    vm.manager.check_invariants()


def test_incremental_checkpoints_and_restore(vm):  # type: ignore[no-untyped-def]
    c = vm.client
    sid = create(c)
    sh(c, sid, "echo A > /root/state")
    a = c.post(f"/sandboxes/{sid}/checkpoints", json={"name": "A"}).json()
    sh(c, sid, "echo B > /root/state")
    b = c.post(f"/sandboxes/{sid}/checkpoints", json={"name": "B"}).json()
    assert b["parent_id"] == a["id"] and b["memory"] is True
    assert b["bytes_stored"] < MEM_MB * 1024 * 1024 // 8, f"B stored {b['bytes_stored']} bytes"
    sh(c, sid, "echo C > /root/state")
    c.post(f"/sandboxes/{sid}/restore", json={"checkpoint_id": a["id"]})
    assert sh(c, sid, "cat /root/state")["stdout"] == "A\n"
    c.post(f"/sandboxes/{sid}/restore", json={"checkpoint_id": b["id"]})
    assert sh(c, sid, "cat /root/state")["stdout"] == "B\n"


def test_fork_children_continue_from_parent_memory(vm):  # type: ignore[no-untyped-def]
    c = vm.client
    sid = create(c)
    sh(c, sid, COUNTER, background=True)
    count(c, sid, above=5)
    r = c.post(f"/sandboxes/{sid}/fork", json={"count": 3})
    assert r.status_code == 201, r.text
    results = r.json()
    assert all(x["error"] is None for x in results), results
    kids = [x["sandbox"]["sandboxID"] for x in results]
    at_fork = [int(sh(c, k, "cat /tmp/count")["stdout"]) for k in kids]
    assert all(n > 5 for n in at_fork), f"children continue the parent's count: {at_fork}"
    for i, k in enumerate(kids):
        sh(c, k, f"echo child{i} > /root/who")
    for k, n in zip(kids, at_fork, strict=True):
        count(c, k, above=n)  # each child keeps counting on its own
    assert [sh(c, k, "cat /root/who")["stdout"] for k in kids] == [f"child{i}\n" for i in range(3)]
    assert sh(c, sid, "cat /root/who 2>/dev/null || echo none")["stdout"] == "none\n"
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "running"


def test_restart_service_with_paused_sandbox(vm):  # type: ignore[no-untyped-def]
    c = vm.client
    sid = create(c)
    sh(c, sid, "echo survived > /root/f")
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    c = vm.restart()
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "paused"
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    assert sh(c, sid, "cat /root/f")["stdout"] == "survived\n"


def test_bad_input_on_microvm(vm):  # type: ignore[no-untyped-def]
    c = vm.client
    assert c.get("/sandboxes/sbx-unknown").status_code == 404
    sid = create(c)
    r = c.get(f"/sandboxes/{sid}/files", params={"path": "/../../etc/passwd"})
    assert r.status_code == 400
    limit = vm.settings.sandbox.max_upload_bytes
    r = c.put(f"/sandboxes/{sid}/files", params={"path": "/root/big"},
              headers={"content-length": str(limit + 1)}, content=b"x" * (limit + 1))  # fmt: skip
    assert r.status_code == 413
    c.post(f"/sandboxes/{sid}/pause")
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "true"})
    assert r.status_code == 409 and "paused" in r.json()["message"]
