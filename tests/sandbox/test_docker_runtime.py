"""The ``docker`` runtime (issue 24) on the machine's real Docker Engine: the API end to end
(create with envs, exec streamed and whole, stdin, timeouts, background and signals, files,
commit checkpoints, pause/resume and filesystem fork) and a SIGKILLed service whose restart
accounts for every container. The stock ``e2b`` SDK probe runs on docker in test_e2b_sdk_vm.

dockerd is started (as root) if ``docker info`` fails. Only this test's containers and
checkpoint images (``k3stack-sbx-*``, ``k3stack-sandbox/checkpoint:<its ids>``) are removed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers.servers import free_port, spawn
from tests.sandbox.waiting import eventually

pytestmark = pytest.mark.timeout(280)


def _ensure_dockerd() -> None:
    if subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        pytest.fail("no Docker Engine: apt-get install docker.io (as root)")
    subprocess.Popen([dockerd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)  # fmt: skip
    eventually(lambda: subprocess.run(["docker", "info"], capture_output=True).returncode,
               lambda rc: rc == 0, timeout_s=60, what="dockerd answering")  # fmt: skip


def _remove_checkpoint_images(ids: list[str]) -> None:
    from services.sandbox.runtime.docker import CHECKPOINT_REPO

    for ck in ids:
        subprocess.run(["docker", "rmi", "-f", f"{CHECKPOINT_REPO}:{ck}"], capture_output=True)


@pytest.fixture
def dock(service):  # type: ignore[no-untyped-def]
    _ensure_dockerd()
    svc = service("docker")
    yield svc
    ids = [ck["id"] for sid in svc.manager.running_ids() for ck in
           svc.client.get(f"/sandboxes/{sid}/checkpoints").json()]  # fmt: skip
    _remove_checkpoint_images(ids + svc.checkpoint_ids)  # type: ignore[attr-defined]


def create(c, **body):  # type: ignore[no-untyped-def]
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0, "runtime": "docker",
                                   **body})  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.json()["runtime"] == "docker"
    return r.json()["sandboxID"]


def sh(c, sid, cmd, **kw):  # type: ignore[no-untyped-def]
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_docker_sandbox_end_to_end(dock):  # type: ignore[no-untyped-def]
    c = dock.client
    dock.checkpoint_ids = []
    info = {r["name"]: r for r in c.get("/runtimes").json()}["docker"]
    assert info["available"] is True and info["memory_checkpoint"] is False  # said, not hidden
    sid = create(c, envVars={"GREETING": "hi"})
    assert sh(c, sid, "echo $GREETING; pwd")["stdout"] == "hi\n/home/user\n"
    assert sh(c, sid, "exit 7")["exit_code"] == 7
    assert sh(c, sid, "cat", stdin="piped")["stdout"] == "piped"
    out = sh(c, sid, "sleep 30", timeout_s=1)
    assert out["timed_out"] is True and out["exit_code"] is None
    with c.stream("POST", f"/sandboxes/{sid}/exec/stream",
                  json={"cmd": "echo one; echo two >&2; exit 3"}) as r:  # fmt: skip
        lines = [line for line in r.iter_lines() if line]
    assert '"kind":"exit"' in lines[-1] and '"exit_code":3' in lines[-1]
    bg = sh(c, sid, "sleep 300", background=True)["pid"]
    assert sh(c, sid, f"kill -0 {bg} && echo alive")["stdout"] == "alive\n"
    assert c.post(f"/sandboxes/{sid}/processes/{bg}/signal", json={"signal": 9}).status_code == 204

    r = c.put(f"/sandboxes/{sid}/files", params={"path": "notes/a.txt"}, content=b"one\n")
    assert r.status_code == 200 and r.json()["path"] == "/home/user/notes/a.txt", r.text
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "notes/a.txt"}).content == b"one\n"
    names = [e["name"] for e in c.get(f"/sandboxes/{sid}/files/list",
                                      params={"path": "notes"}).json()]  # fmt: skip
    assert names == ["a.txt"]
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "nope"}).status_code == 404
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "notes"}).status_code == 409  # a dir

    ck = c.post(f"/sandboxes/{sid}/checkpoints").json()["id"]  # docker commit
    dock.checkpoint_ids.append(ck)
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    assert sh(c, sid, "cat notes/a.txt")["stdout"] == "one\n"  # frozen and thawed
    r = c.post(f"/sandboxes/{sid}/fork", json={"count": 3, "memory": False})
    assert r.status_code == 201, r.text
    kids = [x["sandbox"]["sandboxID"] for x in r.json()]
    for i, kid in enumerate(kids):
        assert sh(c, kid, "cat notes/a.txt")["stdout"] == "one\n"
        sh(c, kid, f"echo child{i} > notes/a.txt")
    assert sh(c, sid, "cat notes/a.txt")["stdout"] == "one\n"
    assert c.post(f"/sandboxes/{sid}/fork", json={"count": 1}).status_code == 409  # no memory
    dock.checkpoint_ids += [x["id"] for x in c.get(f"/sandboxes/{sid}/checkpoints").json()]
    for kid in [*kids, sid]:
        assert c.delete(f"/sandboxes/{kid}").status_code == 204
    images = ["docker", "images", "-q", f"k3stack-sandbox/checkpoint:{ck}"]
    assert subprocess.run(images, capture_output=True, text=True).stdout.strip()
    r = c.post("/gc", params={"grace_s": 0})  # only killed sandboxes had them: all collected
    assert r.status_code == 200 and r.json()["local_files_deleted"] >= 1, r.text
    assert not subprocess.run(images, capture_output=True, text=True).stdout.strip()
    left = subprocess.run(["docker", "ps", "-q", "--filter", f"label=k3stack.sandbox={sid}"],
                          capture_output=True, text=True).stdout  # fmt: skip
    assert left.strip() == ""


def docker_service(tmp_path: Path) -> tuple[list[str], dict[str, str], int, httpx.Client]:
    """The service as its own process on the docker runtime (to SIGKILL it): argv, env, port
    and a client of it."""
    _ensure_dockerd()
    data, port = tmp_path / "data", free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "K3STACK_DATA_DIR": str(data), "K3STACK_SANDBOX__PORT": str(port),
           "K3STACK_SANDBOX__RUNTIME": "docker", "K3STACK_SANDBOX__DEFAULT_TIMEOUT_S": "0"}  # fmt: skip
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    return [sys.executable, "-m", "services.sandbox"], env, port, c


def test_sigkilled_service_reattaches_its_containers(tmp_path):  # type: ignore[no-untyped-def]
    service, env, port, c = docker_service(tmp_path)
    sids: list[str] = []
    try:
        with spawn(service, env=env, port=port, timeout=180) as srv:
            sids = [create(c) for _ in range(3)]
            for sid in sids:
                sh(c, sid, f"echo {sid} > me")
            os.kill(srv.proc.pid, signal.SIGKILL)  # no shutdown: the containers stay
            srv.proc.wait()
        gone = sids[2]  # its container dies while the service is down
        ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=k3stack.sandbox={gone}"],
                             capture_output=True, text=True).stdout.split()  # fmt: skip
        assert ids, "the SIGKILLed service's containers are still there"
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=True)
        with spawn(service, env=env, port=port, timeout=180):
            for sid in sids[:2]:  # re-attached: running, with their files
                assert c.get(f"/sandboxes/{sid}").json()["state"] == "running"
                assert sh(c, sid, "cat me")["stdout"] == f"{sid}\n"
            row = c.get(f"/sandboxes/{gone}").json()  # no checkpoint to recover from: says why
            assert row["state"] == "error" and row["error"], row
            for sid in sids:
                c.delete(f"/sandboxes/{sid}")
    finally:
        for sid in sids:  # whatever a failure left
            ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=k3stack.sandbox={sid}"],
                                 capture_output=True, text=True).stdout.split()  # fmt: skip
            if ids:
                subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
