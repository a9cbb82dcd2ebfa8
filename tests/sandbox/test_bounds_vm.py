"""Nothing a guest does can wedge the service (issue 13, "bounded everything"), on one real
microVM (marker ``vm``): exec time has a ceiling (0 is not forever), output is capped and the
cut is marked, the full upload limit streams through in frames, a file that never ends is cut
at the limit, and a fork bomb neither starves nor out-forks the guest agent.
"""

from __future__ import annotations

import os

import pytest

pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]

LIMIT = 100 * 1024 * 1024


@pytest.fixture(scope="module")
def vm(tmp_path_factory):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from services.sandbox.app import create_app
    from shared.settings import load_settings

    settings = load_settings(
        data_dir=tmp_path_factory.mktemp("bounds"),
        sandbox={
            "runtime": "microvm", "reaper_interval_s": 3600, "exec_max_timeout_s": 8,
            "exec_max_output_bytes": 1 << 20, "max_upload_bytes": LIMIT,
        },
    )  # fmt: skip
    with TestClient(create_app(settings, background=False)) as c:
        r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0,
                                       "runtime": "microvm", "memoryMB": 512})  # fmt: skip
        assert r.status_code == 201, r.text
        sid = r.json()["sandboxID"]
        yield c, sid
        c.delete(f"/sandboxes/{sid}")


def sh(c, sid, cmd, **kw):  # type: ignore[no-untyped-def]
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_exec_time_has_a_ceiling(vm):  # type: ignore[no-untyped-def]
    c, sid = vm
    r = sh(c, sid, "sleep 300", timeout_s=0)  # 0 = the ceiling (8 s here), not forever
    assert r["timed_out"] is True and r["exit_code"] == 137, r
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "true", "timeout_s": 9})
    assert r.status_code == 400 and "EXEC_MAX_TIMEOUT_S" in r.json()["message"], r.text
    assert sh(c, sid, "echo ok")["stdout"] == "ok\n"  # the default (60 s) fits under the ceiling


def test_exec_output_is_capped_and_marked(vm):  # type: ignore[no-untyped-def]
    c, sid = vm
    r = sh(c, sid, "head -c 5000000 /dev/zero | tr '\\0' x; echo done >&2")
    assert r["exit_code"] == 0 and r["truncated"] is True
    assert len(r["stdout"]) == 1 << 20 and r["stderr"] == "done\n"
    r = sh(c, sid, "echo small")
    assert r["truncated"] is False


def test_full_upload_limit_round_trips_and_endless_files_are_cut(vm):  # type: ignore[no-untyped-def]
    c, sid = vm
    data = os.urandom(LIMIT)
    r = c.put(f"/sandboxes/{sid}/files", params={"path": "/tmp/big"}, content=data)
    assert r.status_code == 200 and r.json()["size"] == LIMIT, r.text
    r = c.get(f"/sandboxes/{sid}/files", params={"path": "/tmp/big"})
    assert r.status_code == 200 and r.content == data
    del data
    r = c.put(f"/sandboxes/{sid}/files", params={"path": "/tmp/big2"}, content=b"x" * (LIMIT + 1))
    assert r.status_code == 413, r.text
    r = c.get(f"/sandboxes/{sid}/files", params={"path": "/dev/zero"})
    assert r.status_code == 413 and r.json()["error_code"] == "too_large", r.text
    sh(c, sid, f"truncate -s {LIMIT + 1} /tmp/over; rm /tmp/big")  # sparse: refused by size
    r = c.get(f"/sandboxes/{sid}/files", params={"path": "/tmp/over"})
    assert r.status_code == 413, r.text
    sh(c, sid, "rm /tmp/over")
    assert sh(c, sid, "ls /tmp")["stdout"].count("k3s-tmp") == 0  # no half-written upload left


def test_fork_bomb_cannot_take_the_agent_down(vm):  # type: ignore[no-untyped-def]
    c, sid = vm
    r = sh(c, sid, "f(){ f|f& }; f; sleep 300", timeout_s=5)
    assert r["timed_out"] is True  # the whole command's cgroup is killed at the deadline
    assert sh(c, sid, "echo alive")["stdout"] == "alive\n"
    sh(c, sid, "f(){ f|f& }; f")  # a bomb left running in the background
    try:
        r = c.get(f"/sandboxes/{sid}/files/stat", params={"path": "/tmp"})  # agent-only work
        assert r.status_code == 200, r.text
        r = c.put(f"/sandboxes/{sid}/files", params={"path": "/tmp/during"}, content=b"ok")
        assert r.status_code == 200, r.text
        pids = c.get(f"/sandboxes/{sid}/files", params={"path": "/sys/fs/cgroup/k3s-user/pids.max"})
        assert pids.status_code == 200 and int(pids.text) == 1024
        # the bomb's own cgroup stops it 64 pids short of the sandbox's: the next command runs
        assert sh(c, sid, "echo next command", timeout_s=8)["stdout"] == "next command\n"
    finally:
        c.post(f"/sandboxes/{sid}/exec", json={"argv": ["sh", "-c",
               "for g in /sys/fs/cgroup/k3s-user/e*; do echo 1 > $g/cgroup.kill; done"],
               "timeout_s": 5})  # fmt: skip
