"""Crash recovery (marker ``vm``): the sandbox service is SIGKILLed with sandboxes running and
paused, some QEMUs die while it is down, and the restarted service accounts for every one.

A real service process (``python -m services.sandbox``) on a private data dir: running
sandboxes whose QEMU survived are re-attached (exec, files and checkpoints work, background
processes kept running); one whose QEMU died meanwhile is recovered from its last checkpoint
(``paused``, the reason in ``error``); one with no checkpoint is ``error`` with the reason;
paused ones resume. Nothing is left half-alive, and no memory file outlives its VM.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers.servers import free_port, spawn
from tests.sandbox.waiting import eventually

pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.timeout(900)]


def _service(data: Path, port: int):  # type: ignore[no-untyped-def]
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "K3STACK_DATA_DIR": str(data),
        "K3STACK_SANDBOX__PORT": str(port),
        "K3STACK_SANDBOX__RUNTIME": "microvm",
        "K3STACK_SANDBOX__DEFAULT_TIMEOUT_S": "0",
        "K3STACK_SANDBOX__GC_INTERVAL_S": "0",
    }
    return spawn([sys.executable, "-m", "services.sandbox"], env=env, port=port, timeout=180)


def _vm_of(data: Path, sid: str) -> tuple[int, str]:
    """The QEMU pid and memory file the service recorded (white box: its own SQL row)."""
    with sqlite3.connect(data / "k3stack.db") as db:
        (raw,) = db.execute("select handle from sandbox_sandboxes where id = ?", (sid,)).fetchone()
    import json

    h = json.loads(raw)
    return h["pid"], h["data"]["mem_path"]


def test_sigkilled_service_accounts_for_every_sandbox(tmp_path):  # type: ignore[no-untyped-def]
    data, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    c = httpx.Client(base_url=url, timeout=300)

    def create() -> str:
        r = c.post("/sandboxes", json={"templateID": "busybox", "runtime": "microvm"})
        assert r.status_code == 201, r.text
        return r.json()["sandboxID"]

    def sh(sid: str, cmd: str) -> dict:
        r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd})
        assert r.status_code == 200, r.text
        return r.json()

    with _service(data, port) as srv:
        alive, dies, bare, paused = create(), create(), create(), create()
        sh(alive, "echo before > /root/f")
        bg = c.post(f"/sandboxes/{alive}/exec", json={"cmd": "sleep 600", "background": True})
        bg_pid = bg.json()["pid"]
        sh(dies, "echo saved > /root/f")
        assert c.post(f"/sandboxes/{dies}/checkpoints").status_code == 201
        sh(dies, "echo lost > /root/f")
        sh(paused, "echo paused > /root/f")
        assert c.post(f"/sandboxes/{paused}/pause").status_code == 204
        vms = {sid: _vm_of(data, sid) for sid in (alive, dies, bare)}
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()
    for sid in (dies, bare):  # these QEMUs die while the service is down
        os.kill(vms[sid][0], signal.SIGKILL)
    eventually(lambda: not any(Path(f"/proc/{vms[s][0]}").exists() for s in (dies, bare)),
               what="the killed QEMUs gone")  # fmt: skip

    with _service(data, port):
        states = {s: c.get(f"/sandboxes/{s}").json() for s in (alive, dies, bare, paused)}
        assert states[alive]["state"] == "running", states[alive]
        assert sh(alive, "cat /root/f")["stdout"] == "before\n"  # re-attached: same VM
        assert sh(alive, f"kill -0 {bg_pid} && echo yes")["stdout"] == "yes\n"
        assert c.post(f"/sandboxes/{alive}/checkpoints").status_code == 201

        assert states[dies]["state"] == "paused" and "gone" in states[dies]["error"], states[dies]
        assert c.post(f"/sandboxes/{dies}/resume").status_code == 201
        assert sh(dies, "cat /root/f")["stdout"] == "saved\n"  # its last checkpoint

        assert states[bare]["state"] == "error" and "no checkpoint" in states[bare]["error"]
        assert c.post(f"/sandboxes/{bare}/exec", json={"cmd": "true"}).status_code == 409

        assert states[paused]["state"] == "paused"
        assert c.post(f"/sandboxes/{paused}/resume").status_code == 201
        assert sh(paused, "cat /root/f")["stdout"] == "paused\n"
        for sid in (dies, bare):
            assert not Path(vms[sid][1]).exists(), f"memory file of {sid} left behind"
        running = {s: _vm_of(data, s) for s in (alive, dies, paused)}
        for sid in (alive, dies, bare, paused):
            assert c.delete(f"/sandboxes/{sid}").status_code == 204
    for pid, mem in running.values():
        assert not Path(mem).exists(), mem
        eventually(lambda pid=pid: not Path(f"/proc/{pid}").exists() or
                   Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"),
                   what=f"QEMU {pid} gone")  # fmt: skip
