"""The data plane no client can exhaust (issue 24), over real HTTP on the ``process``,
``docker`` and ``microvm`` runtimes (the last marked ``vm``).

One sandbox full of ``sleep 1000`` execs with ``timeout: 0`` (k3stack's exec, or the stock
``e2b`` SDK's background commands) leaves another sandbox's exec and every kill answering; a
client that disconnects kills its command; concurrent reads of ``/dev/zero`` are 413/429, never
500, and are not buffered whole. Waits are bounded generously (the machine is loaded); the
figures themselves are in ``bench/sandbox_lifecycle.py``.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from services.sandbox.runtime.process.cgroups import CommandCgroups
from tests.sandbox.conftest import process_runtime_ready, served
from tests.sandbox.waiting import eventually

pytestmark = pytest.mark.timeout(280)
GENEROUS_S = 60.0
"""A bound no healthy run comes near (the answers take well under 2 s), but a starved one hits."""


BOMB = "b(){ b | b & }; while :; do command eval b; command eval 'sleep 1'; done"
"""A bomb that holds its bound for as long as it runs. Its branches die when their fork fails,
so it is re-armed each second; and the re-arming loop's own forks go through ``command eval``,
since a non-interactive shell exits on a failed fork except inside a non-special builtin
(a plain ``while :; do b; sleep 1; done`` died with its bomb within 2 s of filling 192 pids)."""
HOLD_S = 5.0
"""How long after filling its bound the bomb must still fill it (the old loop died within 2 s)."""
RUNTIMES = ["process", "docker", pytest.param("microvm", marks=pytest.mark.vm)]


def still_bombing(filled: float, probe: Callable[[], int], floor: int) -> None:
    """The bomb fills its bound again ``HOLD_S`` after it first did (``filled``): what ran in
    between ran beside a live bomb, not after it had died out."""
    time.sleep(max(0.0, filled + HOLD_S - time.monotonic()))
    eventually(probe, lambda n: n >= floor, timeout_s=30, what=f"the bomb still at {floor}+")


def runtime_ready(runtime: str) -> None:
    """Fail (never skip) when ``runtime`` cannot run here; start dockerd if need be."""
    if runtime == "process":
        ok, why = process_runtime_ready()
        if not ok:
            pytest.fail(f"the process runtime cannot run here: {why}")
    elif runtime == "docker":
        from tests.sandbox.test_docker_runtime import _ensure_dockerd

        _ensure_dockerd()


@pytest.fixture(params=RUNTIMES)
def url(request, tmp_path: Path):  # type: ignore[no-untyped-def]
    runtime_ready(request.param)
    with served(tmp_path / "data", request.param, guest_calls_per_sandbox=8,
                max_upload_bytes=64 * 1024 * 1024, guest_pids_max=256) as base:  # fmt: skip
        yield base


def create(c: httpx.Client) -> str:
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0})
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"]


def sleepers(c: httpx.Client, sid: str) -> int:
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "ps -o args | grep -c '^sleep 99[0-9]'"})
    assert r.status_code == 200, r.text
    return int(r.json()["stdout"].strip() or 0)


def test_forty_hung_execs_on_one_sandbox_starve_nothing_else(url):  # type: ignore[no-untyped-def]
    c = httpx.Client(base_url=url, timeout=GENEROUS_S)
    a, b = create(c), create(c)
    statuses: list[int] = []

    def hang() -> None:
        with httpx.Client(base_url=url, timeout=300) as own:
            r = own.post(f"/sandboxes/{a}/exec", json={"cmd": "sleep 999", "timeout_s": 0})
            statuses.append(r.status_code)

    threads = [threading.Thread(target=hang, daemon=True) for _ in range(40)]
    for t in threads:
        t.start()
    eventually(lambda: len(statuses), lambda n: n >= 32, what="the calls past the slots refused")
    assert set(statuses) == {429}, statuses  # past the sandbox's 8 slots: refused at once
    eventually(lambda: sleepers(c, b), lambda n: n == 0, what="b is answering")
    r = c.post(f"/sandboxes/{b}/exec", json={"cmd": "echo b answers"})
    assert r.status_code == 200 and r.json()["stdout"] == "b answers\n"
    r = c.get(f"/sandboxes/{a}/files", params={"path": "/etc/hostname"})
    assert r.status_code == 429, r.text  # a's own data plane is full, and says so
    assert "GUEST_CALLS_PER_SANDBOX" in r.json()["message"]

    assert c.delete(f"/sandboxes/{a}").status_code == 204  # kill never waits for a slot
    for t in threads:
        t.join(GENEROUS_S)
    assert len(statuses) == 40 and statuses.count(429) == 32, statuses
    assert c.get(f"/sandboxes/{a}").status_code == 404  # killed


def test_forty_sdk_background_commands_hold_no_slot(url):  # type: ignore[no-untyped-def]
    from e2b import Sandbox

    opts = {"api_key": "e2b_unused", "api_url": url, "sandbox_url": url}
    sbx = Sandbox.create(template="busybox", timeout=600, **opts)
    other = Sandbox.create(template="busybox", timeout=600, **opts)
    try:
        handles = [sbx.commands.run(f"sleep 99{i % 10}", background=True) for i in range(40)]
        assert all(h.pid for h in handles)
        r = other.commands.run("echo other answers")  # its slots are all free
        assert r.stdout == "other answers\n"
        r = sbx.commands.run("echo same sandbox answers too")  # the 40 hold no slot
        assert r.stdout == "same sandbox answers too\n"
        assert handles[0].kill() is True  # a control call
        eventually(lambda: sleepers(httpx.Client(base_url=url), sbx.sandbox_id),
                   lambda n: n == 39, what="one background command killed")  # fmt: skip
    finally:
        assert Sandbox.kill(sbx.sandbox_id, **opts) is True
        Sandbox.kill(other.sandbox_id, **opts)


def test_client_disconnect_kills_its_command(url):  # type: ignore[no-untyped-def]
    c = httpx.Client(base_url=url, timeout=GENEROUS_S)
    sid = create(c)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/sandboxes/{sid}/exec", json={"cmd": "sleep 998", "timeout_s": 0},
                   timeout=httpx.Timeout(GENEROUS_S, read=3.0))  # fmt: skip
    with pytest.raises(httpx.ReadTimeout):
        with httpx.stream("POST", f"{url}/sandboxes/{sid}/exec/stream",
                          json={"cmd": "sleep 997", "timeout_s": 0},
                          timeout=httpx.Timeout(GENEROUS_S, read=3.0)) as r:  # fmt: skip
            for _ in r.iter_lines():
                pass
    eventually(lambda: sleepers(c, sid), lambda n: n == 0, what="both commands killed")


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_concurrent_endless_reads_are_refused_not_buffered(url):  # type: ignore[no-untyped-def]
    c = httpx.Client(base_url=url, timeout=GENEROUS_S)
    sid = create(c)
    big = 40 * 1024 * 1024
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": f"head -c {big} /dev/zero > big.bin"})
    assert r.json()["exit_code"] == 0, r.text
    zero = "/dev/zero"
    if c.get(f"/sandboxes/{sid}").json()["runtime"] == "process":
        # the process runtime's /dev is the sandbox's own mount (not readable from the host
        # side), so a FIFO fed from /dev/zero stands for it; endless and sizeless the same way
        feed = "mkfifo zero && while true; do cat /dev/zero > zero; done"
        r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": feed, "background": True})
        assert r.status_code == 200, r.text
        zero = "zero"
    before = _rss_kib()

    def read(path: str) -> tuple[int, int]:
        with httpx.stream("GET", f"{url}/sandboxes/{sid}/files", params={"path": path},
                          timeout=GENEROUS_S) as resp:  # fmt: skip
            n = sum(len(chunk) for chunk in resp.iter_bytes())
            return resp.status_code, n

    with ThreadPoolExecutor(12) as pool:
        zeros = list(pool.map(read, [zero] * 6))
        bigs = list(pool.map(read, ["big.bin"] * 6))
    assert {s for s, _ in zeros} <= {413, 429} and zeros, zeros
    assert all(s == 200 and n == big for s, n in bigs), bigs  # streamed, whole
    grown_mb = (_rss_kib() - before) / 1024
    assert grown_mb < 50, f"service RSS grew {grown_mb:.0f} MB over 6 endless + 6 40 MB reads"


@pytest.mark.parametrize("shell", [["/bin/busybox", "sh"], ["/bin/dash"]], ids=["ash", "dash"])
def test_the_bomb_outlives_forks_that_all_fail(shell: list[str]) -> None:
    """The bomb the tests here start stays alive while every fork it tries fails (a pids cgroup
    with room for its own shell alone), so a next command found beside it ran beside a live
    bomb (CI once saw a bomb that had died out: 12 processes for 120 s). Busybox's ash is the
    guests' shell, dash the process runtime's host ``/bin/sh``."""
    cgroups = CommandCgroups()
    owner = f"bombtest-{uuid.uuid4().hex[:8]}"
    cg = cgroups.command(owner)
    assert cg is not None, cgroups.available()
    (cg / "pids.max").write_text("1")
    bomb = subprocess.Popen(
        CommandCgroups.enter_argv(cg, [*shell, "-c", BOMB]), stderr=subprocess.PIPE
    )
    try:
        time.sleep(2)
        assert bomb.poll() is None, f"the bomb's shell exited: {bomb.stderr.read()!r}"  # type: ignore[union-attr]
    finally:
        cgroups.remove_sandbox(owner)
        bomb.wait(timeout=10)
    lost = bomb.stderr.read().decode()  # type: ignore[union-attr]
    assert "fork" in lost, lost  # it did try, and fail, to fork


def test_background_fork_bomb_leaves_room_for_the_next_command(service):  # type: ignore[no-untyped-def]
    svc = service("process", guest_pids_max=256)
    c = svc.client
    rt = svc.manager.runtimes["process"]
    assert rt._cgroups.root is not None, rt._cgroups.available()
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0})
    sid = r.json()["sandboxID"]
    current = rt._cgroups.root / sid / "pids.current"
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "sleep 301", "background": True})
    assert r.status_code == 200, r.text
    # contained before anything is bombed: the sleep counts against the sandbox's cgroup
    assert int(current.read_text()) >= 1
    bomb = BOMB
    assert (
        c.post(f"/sandboxes/{sid}/exec", json={"cmd": bomb, "background": True}).status_code == 200
    )
    eventually(lambda: int(current.read_text()), lambda n: n >= 150, what="the bomb at its bound")
    filled = time.monotonic()
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "echo next command runs", "timeout_s": 60})
    assert r.status_code == 200 and r.json()["stdout"] == "next command runs\n", r.text
    still_bombing(filled, lambda: int(current.read_text()), 150)
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    assert not (rt._cgroups.root / sid).exists()  # the sandbox's cgroups went with it


def test_next_exec_after_a_background_fork_bomb_answers_within_2_s(url):  # type: ignore[no-untyped-def]
    """Each command in its own pids cgroup: a bomb at its own bound leaves the next command
    room, on every runtime (the cgroup files themselves: test_docker_limits, test_bounds_vm)."""
    c = httpx.Client(base_url=url, timeout=GENEROUS_S)
    sid = create(c)
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": BOMB, "background": True})
    assert r.status_code == 200, r.text
    procs = "ls /proc | grep -c '^[0-9]'"

    def count() -> int:
        r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": procs, "timeout_s": 30})
        return int(r.json()["stdout"] or 0) if r.status_code == 200 else 0

    eventually(count, lambda n: n >= 150, what="the bomb near its bound (192)")
    filled = time.monotonic()
    for _ in range(3):
        t = time.monotonic()
        r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "echo next", "timeout_s": 30})
        took = time.monotonic() - t
        assert r.status_code == 200 and r.json()["stdout"] == "next\n", r.text
        assert took < 2.0, f"the next exec took {took:.2f} s"
    still_bombing(filled, count, 150)
    t = time.monotonic()
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    assert time.monotonic() - t < GENEROUS_S


def test_e2b_envs_metrics_and_get_host(url):  # type: ignore[no-untyped-def]
    """The stock SDK's ``envs`` on create, ``get_metrics()`` and ``get_host(port)``: a request
    whose Host is that name reaches the guest's web server through the service."""
    from e2b import Sandbox

    opts = {"api_key": "e2b_unused", "api_url": url, "sandbox_url": url}
    # the SDK's defaults (internet allowed) give a microVM the network device its ports need
    sbx = Sandbox.create(template="busybox", timeout=600, envs={"GREETING": "from envs"}, **opts)
    try:
        assert sbx.commands.run("echo $GREETING").stdout == "from envs\n"
        (metric,) = sbx.get_metrics()
        assert metric.cpu_count >= 1 and 0 <= metric.cpu_used_pct <= 100
        assert 0 < metric.mem_used < metric.mem_total and 0 < metric.disk_used <= metric.disk_total

        sbx.commands.run("mkdir -p www && echo guest-page > www/index.html")
        sbx.commands.run("busybox httpd -f -p 8000 -h /home/user/www", background=True)
        host = sbx.get_host(8000)
        assert host == f"8000-{sbx.sandbox_id}.sandbox.localhost"

        def get() -> str:
            r = httpx.get(f"{url}/index.html", headers={"Host": host}, timeout=10)
            return r.text if r.status_code == 200 else ""

        assert eventually(get, what="the guest page through the service") == "guest-page\n"
        r = httpx.get(f"{url}/x", headers={"Host": "8000-nosuchsandbox.sandbox.localhost"})
        assert r.status_code == 404, r.text
    finally:
        Sandbox.kill(sbx.sandbox_id, **opts)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_stop_with_open_streams_ends_in_bound_and_pauses(tmp_path, runtime):  # type: ignore[no-untyped-def]
    """SIGTERM (what ``k3stack down`` sends) while a client holds a streamed ``sleep``: the
    service cancels the stream after its grace, kills the command and pauses the sandbox, so
    nothing is left running (no container either) and the row is not ``running``."""
    import os
    import signal
    import subprocess
    import sys

    from tests.helpers.servers import free_port, spawn

    data, port = tmp_path / "data", free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "K3STACK_DATA_DIR": str(data), "K3STACK_SANDBOX__PORT": str(port),
           "K3STACK_SANDBOX__RUNTIME": runtime, "K3STACK_SANDBOX__DEFAULT_TIMEOUT_S": "0"}  # fmt: skip
    runtime_ready(runtime)
    service = [sys.executable, "-m", "services.sandbox"]
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=GENEROUS_S)
    with spawn(service, env=env, port=port, timeout=180) as srv:
        sid = create(c)

        def hold() -> None:
            try:
                with httpx.stream("POST", f"http://127.0.0.1:{port}/sandboxes/{sid}/exec/stream",
                                  json={"cmd": "sleep 996", "timeout_s": 0}, timeout=300) as r:  # fmt: skip
                    for _ in r.iter_lines():
                        pass
            except httpx.HTTPError:
                pass

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        eventually(lambda: sleepers(c, sid), lambda n: n == 1, what="the streamed sleep running")
        os.kill(srv.proc.pid, signal.SIGTERM)
        try:  # k3stack down's grace is 10 s; a hung stop would pass GENEROUS_S
            srv.proc.wait(timeout=GENEROUS_S)
        except subprocess.TimeoutExpired:
            pytest.fail("the service did not stop with a stream open")
        holder.join(GENEROUS_S)
    if runtime == "docker":
        left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=k3stack.sandbox={sid}"],
                              capture_output=True, text=True).stdout  # fmt: skip
        assert not left.strip(), f"a container outlived the service: {left}"
    with spawn(service, env=env, port=port, timeout=180):
        assert c.get(f"/sandboxes/{sid}").json()["state"] == "paused"
        cks = [x["id"] for x in c.get(f"/sandboxes/{sid}/checkpoints").json()]
        c.delete(f"/sandboxes/{sid}")
    if runtime == "docker":
        from tests.sandbox.test_docker_runtime import _remove_checkpoint_images

        _remove_checkpoint_images(cks)


def test_slots_bound_each_sandbox_each_key_and_all():  # type: ignore[no-untyped-def]
    from services.sandbox.api.guestcalls import GuestCalls
    from shared.errors import APIError

    calls = GuestCalls(4, per_sandbox=2, per_key=3)

    def refused(sid: str, key: str | None) -> str:
        with pytest.raises(APIError) as exc, calls.slot(sid, key):
            pass
        assert exc.value.status == 429
        return exc.value.message

    with calls.slot("a", "k1"), calls.slot("a", "k1"):
        assert "GUEST_CALLS_PER_SANDBOX" in refused("a", "k2")
        with calls.slot("b", "k1"):
            assert "GUEST_CALLS_PER_KEY" in refused("c", "k1")  # deployed: one key's share
            with calls.slot("c", "k2"):
                assert "GUEST_CALL_LIMIT" in refused("d", None)
    assert not calls.in_flight  # every slot given back, refusals included
