"""Contract test of the whole platform on one machine: ``k3stack up`` → healthy → OpenAPI valid
→ one Celery round trip → ``k3stack down`` leaves no process behind."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from openapi_spec_validator import validate

from shared.cli import group_alive
from shared.queue import worker_groups
from shared.settings import SERVICE_NAMES
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
    up = k3stack("up", "--detach", "--timeout", "200", env=env, timeout=260)
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
    # each service and its workers (the verifier's kernel and web queues have workers of their own)
    expected = len(SERVICE_NAMES) + sum(len(worker_groups(s)) for s in SERVICE_NAMES)
    assert expected == 12
    assert len(rows) == expected and all(r["alive"] for r in rows)
    assert {r["health"] for r in rows if not r["name"].endswith("worker")} == {"ok"}

    # One Celery round trip: the verifier queues a job, its worker runs it.
    verifier = f"http://127.0.0.1:{ports['verifier']}"
    job = httpx.post(f"{verifier}/jobs", json={"kind": "echo", "payload": {"n": 42}}).json()
    deadline = time.monotonic() + 120  # a generous bound for a loaded machine, not a timing
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
    assert f"stopped {expected} processes" in down.stdout
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


def _children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        if entry.isdigit() and int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            kids.append(int(entry))
    return kids


def _start_foreground(env: dict[str, str], *args: str) -> tuple[subprocess.Popen, queue.Queue]:
    """``k3stack up ARGS`` in the foreground with its stdout lines fed to a queue as they come
    (default ARGS: the tools and verifier services, a 200 s start-up budget)."""
    args = args or ("--services", "tools,verifier", "--timeout", "200")
    proc = subprocess.Popen(
        [sys.executable, "-m", "shared.cli", "up", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _wait_for_line(lines: queue.Queue, text: str, timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        assert line is not None, f"up exited before printing {text!r}: {seen}"
        seen.append(line)
        if text in line:
            return seen


def _finish(proc: subprocess.Popen, lines: queue.Queue, timeout: float) -> tuple[str, str]:
    proc.wait(timeout=timeout)
    rest = []
    while (line := lines.get(timeout=10)) is not None:
        rest.append(line)
    return "".join(rest), proc.stderr.read()


def test_foreground_up_stops_everything_on_ctrl_c(stack_env):
    env, ports = stack_env
    proc, lines = _start_foreground(env)
    try:
        # The condition itself, not a sleep: up says it waits for Ctrl-C once all are healthy.
        _wait_for_line(lines, "press Ctrl-C to stop", timeout=240)
        for name in ("tools", "verifier"):
            assert httpx.get(f"http://127.0.0.1:{ports[name]}/health").status_code == 200
        # The subset only: the model service was not started.
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{ports['model']}/health", timeout=1)
        # A worker SIGKILLed (its whole group) is restarted; the stack stays up.
        state_file = Path(env["K3STACK_DATA_DIR"]) / "run" / "state.json"
        before = {c["name"]: c["pid"] for c in json.loads(state_file.read_text())["children"]}
        worker = next(name for name in before if name.startswith("tools-worker"))
        os.killpg(before[worker], signal.SIGKILL)
        _wait_for_line(lines, f"restarted {worker}", timeout=60)
        after = {c["name"]: c["pid"] for c in json.loads(state_file.read_text())["children"]}
        assert after[worker] != before[worker] and group_alive(after[worker])
        assert {n: p for n, p in after.items() if n != worker} == {
            n: p for n, p in before.items() if n != worker
        }
        for name in ("tools", "verifier"):
            assert httpx.get(f"http://127.0.0.1:{ports[name]}/health").status_code == 200
        proc.send_signal(signal.SIGINT)
        # Bounded by design: 10 s grace, then SIGKILL (+5 s); the rest is slack for a busy host.
        out, err = _finish(proc, lines, timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "k3stack stopped" in out
    assert _processes_mentioning(env["K3STACK_DATA_DIR"]) == []


def test_ctrl_c_during_start_up_stops_everything(stack_env):
    env, ports = stack_env
    proc, lines = _start_foreground(env)
    try:
        # Interrupt as soon as the first child answers, while up is still waiting for the rest.
        deadline = time.monotonic() + 240
        while not _children_of(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = _finish(proc, lines, timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "interrupted during start-up" in err
    assert _processes_mentioning(env["K3STACK_DATA_DIR"]) == []
    assert not (Path(env["K3STACK_DATA_DIR"]) / "run" / "state.json").exists()


def test_second_ctrl_c_skips_the_grace_period():
    """A child that ignores SIGTERM is killed as soon as a second Ctrl-C comes."""
    from shared.cli import Child, StopSignals, _stop_children

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert child.stdout.readline() == b"ok\n"
    hurry = StopSignals()
    timer = threading.Timer(0.5, hurry, args=(signal.SIGINT, None))
    timer.start()
    started = time.monotonic()
    left = _stop_children([Child("stubborn", child.pid, [], "")], timeout_s=600, hurry=hurry)
    assert left == []
    assert not group_alive(child.pid)  # _stop_children reaped it: gone, not a zombie
    assert time.monotonic() - started < 300  # far below the 600 s grace it would have waited


def test_unknown_service_is_a_clear_error(stack_env):
    env, _ = stack_env
    r = k3stack("up", "--services", "model,billing", env=env)
    assert r.returncode == 2 and "unknown service(s) billing" in r.stderr


def test_the_supervisor_backs_off_and_gives_up_on_a_crash_loop():
    from shared.cli import Supervisor

    sup = Supervisor()
    now = 1000.0
    delays = []
    for _ in range(Supervisor.MAX_RESTARTS):
        due = sup.exited("tools-worker", now)
        assert due is not None and sup.exited("tools-worker", now) == due  # asked again: same
        delays.append(due - now)
        sup.restarted("tools-worker")
        now = due + 0.1
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0]
    assert sup.exited("tools-worker", now) is None  # a crash loop: report it, do not hide it
    assert sup.exited("verifier", now) == now  # another child has its own history
    later = now + Supervisor.WINDOW_S + 1  # old exits age out of the window
    assert Supervisor().exited("x", later) == later
