"""Contract test of the whole platform on one machine: ``k3stack up`` → healthy → OpenAPI valid
→ one Celery round trip → ``k3stack down`` leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openapi_spec_validator import validate

from shared.cli import group_alive
from tests.helpers.servers import free_port

SERVICES = ("model", "sandbox", "tools", "verifier", "orchestrator")
pytestmark = pytest.mark.slow


def k3stack(*args: str, env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shared.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _processes_mentioning(marker: str) -> list[str]:
    """Command lines and environments of live processes that mention ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            blob = (
                Path(f"/proc/{pid}/cmdline").read_bytes()
                + Path(f"/proc/{pid}/environ").read_bytes()
            )
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if marker.encode() in blob and ") Z " not in stat:
            argv = blob.split(b"\0")[:6]
            found.append(f"{pid}: {argv}")
    return found


@pytest.fixture
def stack_env(tmp_path):
    env = dict(os.environ)
    env["K3STACK_DATA_DIR"] = str(tmp_path / "data")
    ports = {name: free_port() for name in SERVICES}
    for name, port in ports.items():
        env[f"K3STACK_{name.upper()}__PORT"] = str(port)
        env.pop(f"K3STACK_{name.upper()}__URL", None)
    yield env, ports
    k3stack("down", env=env)


def test_up_healthy_openapi_celery_down(stack_env):
    env, ports = stack_env
    up = k3stack("up", "--detach", "--timeout", "30", env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    for name in SERVICES:
        assert f"http://127.0.0.1:{ports[name]}" in up.stdout

    for name, port in ports.items():
        base = f"http://127.0.0.1:{port}"
        health = httpx.get(f"{base}/health").json()
        assert health["status"] == "ok" and health["service"] == name
        doc = httpx.get(f"{base}/openapi.json").json()
        validate(doc)
        assert doc["info"]["title"] == f"k3stack {name}"

    status = k3stack("status", "--json", env=env)
    rows = json.loads(status.stdout)["services"]
    assert len(rows) == 10 and all(r["alive"] for r in rows)
    assert {r["health"] for r in rows if not r["name"].endswith("worker")} == {"ok"}

    # One Celery round trip: the verifier queues a job, its worker runs it.
    verifier = f"http://127.0.0.1:{ports['verifier']}"
    job = httpx.post(f"{verifier}/jobs", json={"kind": "echo", "payload": {"n": 42}}).json()
    deadline = time.monotonic() + 30
    while True:
        got = httpx.get(f"{verifier}/jobs/{job['id']}").json()
        if got["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert got["status"] == "succeeded", got
    assert got["result"]["payload"] == {"n": 42}

    # The orchestrator reaches every other service over HTTP.
    platform = httpx.get(f"http://127.0.0.1:{ports['orchestrator']}/platform").json()
    assert platform["healthy"] is True

    # A running sandbox must not outlive the platform: `down` pauses it (no VM left behind).
    sandbox = f"http://127.0.0.1:{ports['sandbox']}"
    created = httpx.post(f"{sandbox}/sandboxes", json={"templateID": "busybox"}, timeout=120)
    assert created.status_code == 201, created.text
    sid = created.json()["sandboxID"]
    ran = httpx.post(f"{sandbox}/sandboxes/{sid}/exec", json={"cmd": "echo up"}, timeout=60)
    assert ran.json()["stdout"] == "up\n"

    pids = [r["pid"] for r in rows]
    down = k3stack("down", env=env)
    assert down.returncode == 0, down.stderr
    assert "stopped 10 processes" in down.stdout
    for pid in pids:
        assert not group_alive(pid), f"process group {pid} survived `k3stack down`"
    assert _processes_mentioning(env["K3STACK_DATA_DIR"]) == []
    assert k3stack("status", env=env).returncode == 1


def test_taken_port_is_a_clear_error(stack_env):
    env, ports = stack_env
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", ports["tools"]))
        blocker.listen()
        up = k3stack("up", "--detach", env=env)
    assert up.returncode == 2
    assert f"port {ports['tools']} (tools) is already in use" in up.stderr
    assert _processes_mentioning(env["K3STACK_DATA_DIR"]) == []


def test_foreground_up_stops_everything_on_ctrl_c(stack_env):
    env, ports = stack_env
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shared.cli",
            "up",
            "--services",
            "tools,verifier",
            "--timeout",
            "30",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 40
    while True:
        try:
            if (
                httpx.get(f"http://127.0.0.1:{ports['verifier']}/health").status_code == 200
                and httpx.get(f"http://127.0.0.1:{ports['tools']}/health").status_code == 200
            ):
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "subset did not come up"
        time.sleep(0.2)
    # The subset only: the model service was not started.
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{ports['model']}/health", timeout=1)
    time.sleep(1.0)  # let `up` print its table and enter its wait loop
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "k3stack stopped" in out
    assert _processes_mentioning(env["K3STACK_DATA_DIR"]) == []


def test_unknown_service_is_a_clear_error(stack_env):
    env, _ = stack_env
    r = k3stack("up", "--services", "model,billing", env=env)
    assert r.returncode == 2 and "unknown service(s) billing" in r.stderr
