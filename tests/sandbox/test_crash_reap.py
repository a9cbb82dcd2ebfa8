"""Nothing outlives a crash (issue 36): the sandbox service, a real process, is SIGKILLed and
started again on the same data dir; what it re-attached runs on, and everything else a previous
run of *this* instance left is gone: holder processes and stage mounts (process runtime),
containers and pause images (docker), QEMUs — the warm pool's ``-incoming defer`` ones too —
and their ``/dev/shm`` files (microvm, marker ``vm``).

A sandbox "nobody can re-attach" is made the way a crash makes one: its row caught
``creating`` with no handle (SIGKILL between starting the VM and writing its row), written into
the service's SQLite while the service is down.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers.servers import free_port, spawn
from tests.sandbox.waiting import eventually

pytestmark = pytest.mark.timeout(600)


def _service(data: Path, port: int, runtime: str, **extra: str):  # type: ignore[no-untyped-def]
    env = {
        **os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "K3STACK_DATA_DIR": str(data), "K3STACK_SANDBOX__PORT": str(port),
        "K3STACK_SANDBOX__RUNTIME": runtime, "K3STACK_SANDBOX__DEFAULT_TIMEOUT_S": "0",
        "K3STACK_SANDBOX__GC_INTERVAL_S": "0", "K3STACK_SANDBOX__WARM_POOL": "0", **extra,
    }  # fmt: skip
    return spawn([sys.executable, "-m", "services.sandbox"], env=env, port=port, timeout=240)


def _handle(data: Path, sid: str) -> dict:
    with sqlite3.connect(data / "k3stack.db") as db:
        (raw,) = db.execute("select handle from sandbox_sandboxes where id = ?", (sid,)).fetchone()
    return json.loads(raw)


def _orphan(data: Path, sid: str) -> None:
    """Make ``sid`` what a crash mid-create leaves: a ``creating`` row with no handle."""
    with sqlite3.connect(data / "k3stack.db") as db:
        db.execute("update sandbox_sandboxes set state = 'creating', handle = null where id = ?",
                   (sid,))  # fmt: skip


def _crash(srv) -> None:  # type: ignore[no-untyped-def]
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait()


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def _create(c: httpx.Client, runtime: str) -> str:
    r = c.post("/sandboxes", json={"templateID": "busybox", "runtime": runtime})
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"]


def _sh(c: httpx.Client, sid: str, cmd: str) -> str:
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd})
    assert r.status_code == 200, r.text
    return r.json()["stdout"]


def test_process_sandbox_nobody_reattaches_is_reaped(tmp_path):  # type: ignore[no-untyped-def]
    from services.sandbox.runtime.process.launch import STAGE_ROOT

    data, port = tmp_path / "data", free_port()
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    with _service(data, port, "process") as srv:
        kept, lost = _create(c, "process"), _create(c, "process")
        _sh(c, kept, "echo kept > /root/f")
        holder = _handle(data, lost)["data"]["outer_pid"]
        _crash(srv)
    _orphan(data, lost)
    try:
        with _service(data, port, "process"):
            assert _sh(c, kept, "cat /root/f") == "kept\n"  # re-attached, untouched
            eventually(lambda: _gone(holder), what=f"the orphan's holder {holder} ended")
            assert not (STAGE_ROOT / lost).exists(), "the orphan's stage is left"
            mounts = Path("/proc/self/mountinfo").read_text()
            assert f"/{lost}/" not in mounts, "an overlay of the orphan is still mounted"
            assert f"{STAGE_ROOT}/{kept}/root" in mounts  # the kept one's stage stays
            assert c.delete(f"/sandboxes/{kept}").status_code == 204
    finally:
        c.close()


def _docker(*args: str) -> list[str]:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)
    return out.stdout.split()


def test_docker_container_and_pause_image_nobody_reattaches_are_reaped(tmp_path):  # type: ignore[no-untyped-def]
    from services.sandbox.runtime.docker import CHECKPOINT_REPO
    from tests.sandbox.test_docker_runtime import _ensure_dockerd, _remove_checkpoint_images

    _ensure_dockerd()
    data, port = tmp_path / "data", free_port()
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    killed_cks: list[str] = []
    try:
        with _service(data, port, "docker") as srv:
            kept, lost, killed = (_create(c, "docker") for _ in range(3))
            _sh(c, kept, "echo kept > /root/f")
            assert c.post(f"/sandboxes/{killed}/pause").status_code == 204
            killed_cks = [ck["id"] for ck in c.get(f"/sandboxes/{killed}/checkpoints").json()]
            assert killed_cks and _docker("images", "-q", f"{CHECKPOINT_REPO}:{killed_cks[-1]}")
            assert c.delete(f"/sandboxes/{killed}").status_code == 204
            container = _handle(data, lost)["data"]["container"]
            _crash(srv)
        _orphan(data, lost)
        with _service(data, port, "docker"):
            assert _sh(c, kept, "cat /root/f") == "kept\n"
            assert not _docker("ps", "-aq", "--no-trunc", "--filter", f"id={container}")
            for ck in killed_cks:  # the killed sandbox's pause image
                assert not _docker("images", "-q", f"{CHECKPOINT_REPO}:{ck}"), ck
            assert c.delete(f"/sandboxes/{kept}").status_code == 204
    finally:
        _remove_checkpoint_images(killed_cks)
        c.close()


@pytest.mark.vm
def test_warm_pool_qemu_is_reaped_and_the_running_vm_kept(tmp_path):  # type: ignore[no-untyped-def]
    from services.sandbox.runtime.microvm.jail import tagged_qemus
    from services.sandbox.runtime.microvm.memory import instance_key, shm_dir

    data, port = tmp_path / "data", free_port()
    instance = instance_key(data / "sandbox" / "microvm")
    shm = shm_dir(instance)
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=400)

    def pool() -> list[int]:
        return [p for p, argv in tagged_qemus(instance).items() if "-incoming" in argv]

    try:
        with _service(data, port, "microvm", K3STACK_SANDBOX__WARM_POOL="1") as srv:
            kept = _create(c, "microvm")
            _sh(c, kept, "echo kept > /root/f")
            eventually(pool, timeout_s=300, what="the warm pool's QEMU started")
            old_pool = pool()
            vm = _handle(data, kept)["pid"]
            _crash(srv)
        assert not _gone(vm) and not any(_gone(p) for p in old_pool)  # both survived the crash
        with _service(data, port, "microvm", K3STACK_SANDBOX__WARM_POOL="0"):
            assert _sh(c, kept, "cat /root/f") == "kept\n"  # re-attached: same VM
            assert _handle(data, kept)["pid"] == vm
            eventually(lambda: all(_gone(p) for p in old_pool), what="the old pool's QEMU ended")
            assert set(tagged_qemus(instance)) == {vm}, tagged_qemus(instance)
            files = sorted(p.name for p in shm.rglob("*.mem"))
            assert files == [Path(_handle(data, kept)["data"]["mem_path"]).name], files
            assert c.delete(f"/sandboxes/{kept}").status_code == 204
        assert not tagged_qemus(instance)
    finally:
        c.close()


def test_stop_past_its_budget_stops_the_rest_and_leaves_nothing(service):  # type: ignore[no-untyped-def]
    """A stop pauses what it can within ``shutdown_budget_s`` and stops the rest at their last
    checkpoint: nothing is left running for a ``down`` to cut off (budget 0: none is paused)."""
    svc = service("process", shutdown_budget_s=0)
    c = svc.client
    sids = [_create(c, "process") for _ in range(3)]
    assert c.post(f"/sandboxes/{sids[0]}/checkpoints").status_code == 201
    holders = [svc.manager.live_handle(s).data["outer_pid"] for s in sids]
    svc.stop()
    assert all(_gone(pid) for pid in holders), "a sandbox's holder outlived the stop"
    c = svc.start()
    states = {s: c.get(f"/sandboxes/{s}").json() for s in sids}
    assert states[sids[0]]["state"] == "paused", states[sids[0]]  # at its last checkpoint
    assert "shutdown budget" in states[sids[0]]["error"], states[sids[0]]
    assert all(states[s]["state"] == "error" for s in sids[1:]), states
