"""Pause on the ``docker`` runtime is the cgroup freezer (issue 24): a background process and
its memory survive pause/resume, exec while paused is refused with a 409 naming the state, a
paused sandbox survives a SIGKILLed service and is re-attached as paused, kill of a paused
sandbox removes its frozen container, and a clean stop ends frozen containers too (they resume
from their pause commit, files kept). Real Docker Engine, the service as a real process.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import tarfile

import httpx
import pytest

from tests.helpers.servers import spawn
from tests.sandbox.test_docker_runtime import _remove_checkpoint_images, create, docker_service, sh
from tests.sandbox.waiting import COUNTER, eventually

pytestmark = pytest.mark.timeout(280)


def _containers(sid: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=k3stack.sandbox={sid}"],
                         capture_output=True, text=True).stdout  # fmt: skip
    return out.split()


def _status(sid: str) -> str:
    ids = _containers(sid)
    if not ids:
        return "gone"
    out = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", ids[0]],
                         capture_output=True, text=True).stdout  # fmt: skip
    return out.strip()


def _count(c: httpx.Client, sid: str) -> int:
    return int(sh(c, sid, "cat /tmp/count")["stdout"])


def _pause_keeps(c: httpx.Client, sid: str) -> int:
    """Pause: the container is frozen (its counter stands still) and exec is refused with a
    409 that names the state. Returns the count at the pause."""
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    assert _status(sid) == "paused"
    before = _count_frozen(sid)
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "true"})
    assert r.status_code == 409 and "paused" in r.text and "resume" in r.text, r.text
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "paused"
    assert _count_frozen(sid) == before
    return before


def _resumed(c: httpx.Client, sid: str, pid: int, before: int) -> None:
    """Resumed: the same process, its counter going on from where it was (not restarted)."""
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    assert _status(sid) == "running"
    assert sh(c, sid, f"kill -0 {pid} && echo alive")["stdout"] == "alive\n"
    eventually(lambda: _count(c, sid), lambda n: n > before + 3, what="the counter going on")


def test_docker_pause_is_the_freezer_and_survives_a_sigkilled_service(tmp_path):  # type: ignore[no-untyped-def]
    service, env, port, c = docker_service(tmp_path)
    sids: list[str] = []
    cks: list[str] = []
    try:
        with spawn(service, env=env, port=port, timeout=180) as srv:
            sid, other = create(c), create(c)
            sids += [sid, other]
            pid = sh(c, sid, COUNTER, background=True)["pid"]
            eventually(lambda: _count(c, sid), lambda n: n >= 3, what="the counter counting")
            before = _pause_keeps(c, sid)
            _resumed(c, sid, pid, before)

            assert c.post(f"/sandboxes/{other}/pause").status_code == 204  # kill while frozen
            assert c.delete(f"/sandboxes/{other}").status_code == 204
            eventually(lambda: _containers(other), lambda ids: not ids,
                       what="the frozen container removed")  # fmt: skip

            before = _pause_keeps(c, sid)
            cks = [x["id"] for x in c.get(f"/sandboxes/{sid}/checkpoints").json()]
            os.kill(srv.proc.pid, signal.SIGKILL)
            srv.proc.wait()
        assert _status(sid) == "paused"  # the freezer holds it while no service runs
        with spawn(service, env=env, port=port, timeout=180) as srv:
            row = c.get(f"/sandboxes/{sid}").json()
            assert row["state"] == "paused" and _status(sid) == "paused", row
            _resumed(c, sid, pid, before)
            sh(c, sid, "echo kept > mark")
            assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
            cks = [x["id"] for x in c.get(f"/sandboxes/{sid}/checkpoints").json()]
            os.kill(srv.proc.pid, signal.SIGTERM)  # a clean stop leaves no container behind
            srv.proc.wait(timeout=120)
        assert _status(sid) == "gone"
        with spawn(service, env=env, port=port, timeout=180):
            row = c.get(f"/sandboxes/{sid}").json()
            assert row["state"] == "paused" and "service stopped" in row["error"], row
            assert c.post(f"/sandboxes/{sid}/resume").status_code == 201  # from the commit
            assert sh(c, sid, "cat mark")["stdout"] == "kept\n"
            assert c.delete(f"/sandboxes/{sid}").status_code == 204
    finally:
        for s in sids:  # whatever a failure left
            if ids := _containers(s):
                subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
        _remove_checkpoint_images(cks)


def _count_frozen(sid: str) -> int:
    """The counter file of a frozen container, read by the engine (exec is refused)."""
    out = subprocess.run(["docker", "cp", f"{_containers(sid)[0]}:/tmp/count", "-"],
                         capture_output=True, check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        member = tar.extractfile("count")
        assert member is not None
        return int(member.read())
