"""Sandbox lifecycle latency and memory of the microvm runtime, with QEMU's own snapshot as
baseline.

Prints the median of N runs (default 5). Runtime level (``MicroVMRuntime`` called directly):
create (boot to agent), exec round trip, checkpoints (full, deduped, incremental with 1% and
10% of guest pages dirtied), restores (into a fresh QEMU; from the warm pool to the agent's
hello and to the first exec; the first restore of a checkpoint never restored, which assembles
its base file; the older copying restore for comparison), fork x3 and the children's memory
against one child's, pause/resume. Through the service's API (the app in this process over
HTTP semantics, ``TestClient``): create, incremental checkpoint, pause, resume, fork x3. Every
timed restore checks the restored guest state (a file written before the checkpoint).

Baselines, each labelled in the output:

* **QEMU full snapshot**: QMP ``migrate`` of the running guest to a file (all of RAM).
* **QEMU full restore**: a new QEMU process (private anonymous RAM, ``-incoming defer``)
  loading that whole stream, from process start to the guest agent's answer.
* **exec in a running VM**: the same command timed after restores, in a VM whose emulator has
  translated it before (so "first exec after restore" minus this is the restore's own cost),
  with QEMU's translation-block counts (HMP ``info jit``) showing how much guest code the
  first exec after a restore makes TCG translate afresh.

Busybox image, 256 MiB guest.

    .venv/bin/python bench/sandbox_lifecycle.py [--runs 5] [--memory-mb 256]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import traceback
from pathlib import Path

from services.sandbox.guest.protocol import AgentClient
from services.sandbox.runtime.base import ExecRequest, SandboxSpec
from services.sandbox.runtime.microvm import MicroVMRuntime
from services.sandbox.runtime.microvm.launch import qemu_cmdline, short_dir
from services.sandbox.runtime.microvm.qmp import QMPClient
from shared.objectstore import LocalObjectStore
from shared.settings import SandboxSettings

STATE = "/home/user/bench-state"
CAT = ExecRequest(argv=["cat", STATE])
res: dict[str, list[float]] = {}
notes: dict[str, str] = {}
nbytes: dict[str, list[int]] = {}


def rec(name: str, ms: float, note: str = "") -> None:
    res.setdefault(name, []).append(ms)
    if note:
        notes[name] = note


def since(t: float) -> float:
    return (time.perf_counter() - t) * 1000


def check(rt, h, want: bytes) -> None:  # type: ignore[no-untyped-def]
    got = rt.read_file(h, STATE)
    assert got == want, f"restored state wrong: {got!r} != {want!r}"


def dirty(rt, h, fraction: float, memory_mb: int) -> None:  # type: ignore[no-untyped-def]
    """Rewrite ~fraction of guest RAM: a tmpfs file of random bytes (overwritten each time)."""
    kib = int(memory_mb * 1024 * fraction)
    rt.exec(h, ExecRequest(cmd=f"head -c {kib}k /dev/urandom > /tmp/dirty", timeout_s=60))


def tb_count(rt, h) -> int:  # type: ignore[no-untyped-def]
    """Translation blocks QEMU's TCG holds for this guest (HMP ``info jit``)."""
    live = rt._live[h.sandbox_id]  # noqa: SLF001 - the bench looks inside on purpose
    out = live.qmp.execute("human-monitor-command", **{"command-line": "info jit"})
    for line in out.splitlines():
        if line.startswith("TB count"):
            return int(line.split()[-1])
    return -1


def mem_of(pid: int) -> dict[str, int]:
    """KiB from ``/proc/<pid>/smaps_rollup``: Rss, Pss, and the private/shared split."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, val, *_ = line.split()
        out[key.rstrip(":")] = int(val)
    return out


def restore_checked(rt, name, chain, store, work, want) -> tuple:  # type: ignore[no-untyped-def]
    """Restore, time to the hello and to the first exec (which reads the restored state)."""
    t = time.perf_counter()
    r = rt.restore(name, chain, store, work / name)
    hello = since(t)
    tb0 = tb_count(rt, r)  # not timed: HMP walks QEMU's translation tables
    t = time.perf_counter()
    out = rt.exec(r, CAT)
    first = hello + since(t)
    assert out.stdout.encode() == want, f"restored state wrong: {out}"
    return r, hello, first, tb0


class BenchRuntime(MicroVMRuntime):
    """Remembers every VM it made, so a failing run leaves no QEMU behind."""

    made: list = []
    runtimes: list = []

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.runtimes.append(self)

    def create(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.made.append(h := super().create(*args, **kwargs))
        return h

    def restore(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.made.append(h := super().restore(*args, **kwargs))
        return h

    @classmethod
    def end_all(cls) -> None:
        rt = MicroVMRuntime()
        for h in cls.made:
            with contextlib.suppress(Exception):
                rt.destroy(h)
        for pooled in cls.runtimes:
            pooled.close()


def runtime_part(n: int, mem: int, work: Path) -> None:
    store = LocalObjectStore(work / "objects")
    rt = BenchRuntime()
    ok, why = rt.available()
    if not ok:
        raise SystemExit(f"microvm unavailable: {why} (run scripts/setup_sandbox.sh)")
    spec = SandboxSpec(memory_mb=mem)
    print(f"accel={rt.accel} runs={n} memory={mem} MiB load={os.getloadavg()}", flush=True)
    handles = []
    for i in range(n):
        t = time.perf_counter()
        handles.append(rt.create(f"bench-{i}", spec, work / f"vm{i}"))
        rec("create (boot to agent)", since(t))
        if i:
            rt.destroy(handles.pop(0))
    h = handles[0]
    for _ in range(max(n, 20)):
        t = time.perf_counter()
        rt.exec(h, ExecRequest(argv=["true"]))
        rec("exec round trip", since(t))
    rt.exec(h, ExecRequest(cmd="i=0; while true; do i=$((i+1)); sleep 0.1; done", background=True))
    want = b"restored state\n"
    rt.write_file(h, STATE, want)
    for _ in range(n):
        tb0 = tb_count(rt, h)
        t = time.perf_counter()
        assert rt.exec(h, CAT).stdout.encode() == want
        rec("BASELINE exec in a running VM (cat)", since(t), "same command as first exec below")
        rec("  TCG blocks translated by it", tb_count(rt, h) - tb0)
    for i in range(n):
        fresh = LocalObjectStore(work / f"fresh{i}")
        t = time.perf_counter()
        ck = rt.checkpoint(h, None, fresh)
        rec("checkpoint full (empty store)", since(t))
        nbytes.setdefault("checkpoint full (empty store)", []).append(ck.stored_bytes)
        shutil.rmtree(work / f"fresh{i}", ignore_errors=True)
    for _ in range(n):
        t = time.perf_counter()
        ck = rt.checkpoint(h, None, store)
        rec("checkpoint full (pages deduped in store)", since(t))
        nbytes.setdefault("checkpoint full (pages deduped in store)", []).append(ck.stored_bytes)
        chain = [ck]
    for frac in (0.01, 0.10):
        name = f"checkpoint incr {int(frac * 100)}% dirty"
        for _ in range(n):
            dirty(rt, h, frac, mem)
            t = time.perf_counter()
            ck = rt.checkpoint(h, chain[-1], store)
            rec(name, since(t))
            rec(name + " (vCPU downtime)", ck.stats["downtime_ms"])
            nbytes.setdefault(name, []).append(ck.stored_bytes)
            chain.append(ck)
    for _ in range(n):  # a checkpoint nobody restored yet: the base file is assembled
        ck = rt.checkpoint(h, chain[-1], store)
        chain.append(ck)
        r, hello, _, _ = restore_checked(rt, "bench-a", chain, store, work, want)
        rec("restore, first of its checkpoint (assembles base, fresh QEMU)", hello)
        rec("  of which base assembly", r.data["restore_stats"]["memory_ms"])
        rt.destroy(r)
    for _ in range(n):  # base exists now; no pool: QEMU started by the restore
        r, hello, _, _ = restore_checked(rt, "bench-c", chain, store, work, want)
        rec("restore into a fresh QEMU (base exists)", hello)
        rt.destroy(r)
    rt.pool_size = 1
    rt.prewarm(checkpoint=chain[-1], store=store)
    for _ in range(n):
        while len(rt.pool) < 1:  # as between requests: the pool refilled in the background
            time.sleep(0.05)
        r, hello, first, tb0 = restore_checked(rt, "bench-w", chain, store, work, want)
        st = r.data["restore_stats"]
        assert st["pooled"], st
        rec("restore to hello (warm pool)", hello)
        rec("  hellos sent (1 = the first was answered)", st["hellos"])
        rec("  of which device state load", st["device_state_ms"])
        rec("  of which cont -> agent hello", st["hello_ms"])
        rec("restore to first exec (warm pool)", first)
        rec("  TCG blocks translated by first exec", tb_count(rt, r) - tb0)
        t = time.perf_counter()
        tb1 = tb_count(rt, r)
        rt.exec(r, CAT)
        rec("second exec after restore", since(t))
        rec("  TCG blocks translated by second exec", tb_count(rt, r) - tb1)
        rt.destroy(r)
    copying = BenchRuntime(pool_size=1, cow_restore=False)
    copying.prewarm(spec)
    for _ in range(n):
        while len(copying.pool) < 1:
            time.sleep(0.05)
        r, hello, first, _ = restore_checked(copying, "bench-x", chain, store, work, want)
        rec("BASELINE copying restore to hello (warm pool)", hello,
            "older way: every non-zero page copied into a new file")  # fmt: skip
        rec("BASELINE copying restore to first exec", first)
        copying.destroy(r)
    fork_memory(copying, chain, store, work, "BASELINE copying restore")
    copying.close()
    guarded("default warm pool", default_pool_part, rt, h, chain, store, work, want, n)
    guarded("fork", fork_part, rt, h, chain, store, work, want, n)
    rt.pool_size = 0
    rt.close()
    guarded("pause/resume", pause_part, rt, chain, store, work, want, n)
    guarded("BASELINE QEMU full snapshot/restore", qemu_baseline, rt, h, work, n, want)
    rt.destroy(h)


def default_pool_part(rt, h, chain, store, work, want, n) -> None:  # type: ignore[no-untyped-def]
    """The service's default: a template QEMU prewarmed, so the first restore of a fresh
    checkpoint copies its pages into it; its base is pooled behind it for the next."""
    rt.pool_size = SandboxSettings().warm_pool
    spec = chain[-1].spec
    image = rt._image(spec.image)

    def wait(base: str | None) -> None:
        deadline = time.monotonic() + 120
        while rt.pool.count(image, spec, rt.accel, base) < 1:  # as between requests
            if time.monotonic() > deadline:
                raise TimeoutError(f"the warm pool did not fill for base {base}")
            time.sleep(0.05)

    rt.prewarm(spec)  # as the service does at start
    for _ in range(n):
        ck = rt.checkpoint(h, chain[-1], store)  # fresh: no base file, no QEMU on it
        wait(None)
        r, _, first, _ = restore_checked(rt, "bench-d1", [*chain, ck], store, work, want)
        assert r.data["restore_stats"]["pool"] == "template", r.data["restore_stats"]
        rec("fresh checkpoint: first restore to first exec (default pool)", first)
        wait(ck.id)
        r2, _, again, _ = restore_checked(rt, "bench-d2", [*chain, ck], store, work, want)
        assert r2.data["restore_stats"]["pool"] == "base", r2.data["restore_stats"]
        rec("fresh checkpoint: repeated restore to first exec (default pool)", again)
        rt.destroy(r)
        rt.destroy(r2)


def fork_part(rt, h, chain, store, work, want, n) -> None:  # type: ignore[no-untyped-def]
    for _ in range(n):
        t = time.perf_counter()
        ck = rt.checkpoint(h, chain[-1], store)
        kids = [rt.restore(f"bench-k{j}", [*chain, ck], store, work / f"k{j}") for j in range(3)]
        rec("fork x3 (checkpoint + 3 restores)", since(t))
        chain.append(ck)
        for k in kids:
            check(rt, k, want)
            rt.destroy(k)
    fork_memory(rt, chain, store, work, "copy-on-write restore")


def host_kib(handles) -> int:  # type: ignore[no-untyped-def]
    """Host memory a set of VMs holds, KiB: each QEMU's private pages (heap, TCG code, guest
    pages it wrote) plus the allocated size of their memory files, each file once."""
    total, inodes = 0, {}
    for h in handles:
        m = mem_of(h.pid)
        total += m["Private_Clean"] + m["Private_Dirty"]
        st = Path(h.data["mem_path"]).stat()
        inodes[st.st_ino] = st.st_blocks // 2
    return total + sum(inodes.values())


def fork_memory(rt, chain, store, work, label: str) -> None:  # type: ignore[no-untyped-def]
    """One child alone vs three together, each after the same exec."""
    one = rt.restore("bench-one", chain, store, work / "one")
    rt.exec(one, CAT)
    alone, alone_host = mem_of(one.pid), host_kib([one])
    rt.destroy(one)
    kids = [rt.restore(f"bench-k{j}", chain, store, work / f"k{j}") for j in range(3)]
    for k in kids:
        rt.exec(k, CAT)
    together, together_host = [mem_of(k.pid) for k in kids], host_kib(kids)
    for k in kids:
        rt.destroy(k)
    mib = 1 / 1024
    rss, pss = sum(m["Rss"] for m in together), sum(m["Pss"] for m in together)
    print(f"\nfork x3 memory, {label} (MiB; smaps_rollup of each QEMU):", flush=True)
    print(f"  one child alone:     host {alone_host * mib:6.1f}  RSS {alone['Rss'] * mib:6.1f}"
          f"  PSS {alone['Pss'] * mib:6.1f}")  # fmt: skip
    print(f"  3 x one child:       host {3 * alone_host * mib:6.1f}  RSS {3 * alone['Rss'] * mib:6.1f}"
          f"  PSS {3 * alone['Pss'] * mib:6.1f}")  # fmt: skip
    print(f"  3 children together: host {together_host * mib:6.1f}  RSS {rss * mib:6.1f}"
          f"  PSS {pss * mib:6.1f}")  # fmt: skip
    print("  host = private pages of the QEMUs + their memory files, each file once; RSS sums"
          " count a page shared by 3 QEMUs 3 times, PSS once")  # fmt: skip


def pause_part(rt, chain, store, work, want, n) -> None:  # type: ignore[no-untyped-def]
    p = rt.restore("bench-p", chain, store, work / "p")
    pchain = list(chain)
    for _ in range(n):
        t = time.perf_counter()
        ck = rt.checkpoint(p, pchain[-1], store)
        rt.stop(p)
        rec("pause (checkpoint + stop)", since(t))
        pchain.append(ck)
        t = time.perf_counter()
        p = rt.restore("bench-p", pchain, store, work / "p")
        rec("resume (restore of the new checkpoint, fresh QEMU)", since(t))
        check(rt, p, want)
    rt.destroy(p)


def _tcp_sink(path: Path) -> tuple[int, threading.Thread]:
    """A loopback port whose one connection is written to ``path``: where the jailed QEMU
    sends its migration stream (``-sandbox spawn=deny`` refuses ``exec:cat``, and its chroot
    hides host paths from ``unix:``)."""
    server = socket.create_server(("127.0.0.1", 0))

    def drain() -> None:
        conn, _ = server.accept()
        with conn, open(path, "wb") as out:
            while chunk := conn.recv(1 << 20):
                out.write(chunk)
        server.close()

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return server.getsockname()[1], thread


def qemu_baseline(rt, h, work: Path, n: int, want: bytes) -> None:  # type: ignore[no-untyped-def]
    """QEMU's own full snapshot and full restore (process start to the guest's answer)."""
    from services.sandbox.images.builder import get_image

    live = rt._live[h.sandbox_id]  # noqa: SLF001
    image = get_image("busybox")
    for _ in range(n):
        path = work / "full.mig"
        t = time.perf_counter()
        port, sink = _tcp_sink(path)
        live.qmp.execute("migrate", uri=f"tcp:127.0.0.1:{port}")
        while (live.qmp.execute("query-migrate") or {}).get("status") not in (
            "completed",
            "failed",
        ):
            time.sleep(0.002)
        sink.join(timeout=60)
        rec(
            "BASELINE QEMU full snapshot (all RAM)",
            since(t),
            "QMP migrate to a file (via loopback)",
        )
        live.qmp.execute("cont")
        sock_dir = short_dir(f"qb{os.getpid()}")
        cmd = qemu_cmdline(image, h.spec, rt.accel, sock_dir, Path("/unused"), incoming=True)
        i = cmd.index("-object")
        cmd[i + 1] = f"memory-backend-ram,id=mem,size={h.spec.memory_mb}M"  # private RAM
        j = cmd.index("migration.send-configuration=off")  # a full stream carries it
        del cmd[j - 1 : j + 1]
        t = time.perf_counter()
        err = open(work / "baseline.err", "wb")  # noqa: SIM115 - the child's stderr
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)  # fmt: skip
        try:
            qmp = QMPClient(str(sock_dir / "qmp.sock"), timeout_s=30)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(sock_dir / "agent.sock"))
            qmp.execute("migrate-incoming", uri=f"exec:cat {path}")
            while (qmp.execute("query-migrate") or {}).get("status") not in ("completed", "failed"):
                time.sleep(0.002)
            qmp.execute("cont")
            agent = AgentClient(sock)
            agent.sync(timeout_s=30, retry_s=1.0)
            rec("BASELINE QEMU full restore (process start to hello)", since(t),
                "new QEMU, private RAM, whole stream")  # fmt: skip
            assert agent.read_file(STATE) == want
            agent.close()
            qmp.close()
        except Exception:
            print((work / "baseline.err").read_text(errors="replace")[-2000:])
            raise
        finally:
            err.close()
            proc.kill()
            proc.wait()
            shutil.rmtree(sock_dir, ignore_errors=True)
            path.unlink(missing_ok=True)


def api_part(n: int, mem: int, work: Path) -> None:
    """The same operations through the service's routes (manager, SQL, object store)."""
    from fastapi.testclient import TestClient

    from services.sandbox.app import create_app
    from shared.settings import load_settings

    settings = load_settings(
        data_dir=work / "svc",
        sandbox={"runtime": "microvm", "reaper_interval_s": 3600, "warm_pool": 1},
    )
    with TestClient(create_app(settings, background=False)) as c:
        body = {"templateID": "busybox", "timeout": 0, "runtime": "microvm", "memoryMB": mem}
        r = c.post("/sandboxes", json=body)
        assert r.status_code == 201, r.text
        sid = r.json()["sandboxID"]

        def ex(cmd: str) -> str:
            r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd})
            assert r.status_code == 200, r.text
            return r.json()["stdout"]

        ex(f"echo api > {STATE}")
        for i in range(n):
            ex(f"echo {i} >> /home/user/log")
            t = time.perf_counter()
            r = c.post(f"/sandboxes/{sid}/checkpoints")
            assert r.status_code == 201, r.text
            rec("API checkpoint (incremental, small change)", since(t))
        for _ in range(n):
            t = time.perf_counter()
            assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
            rec("API pause", since(t))
            t = time.perf_counter()
            r = c.post(f"/sandboxes/{sid}/resume", json={})
            assert r.status_code == 201, r.text
            rec("API resume", since(t))
            assert ex(f"cat {STATE}") == "api\n"
            rec("API resume to first exec", since(t))
        for _ in range(n):
            t = time.perf_counter()
            r = c.post(f"/sandboxes/{sid}/fork", json={"count": 3})
            assert r.status_code == 201, r.text
            rec("API fork x3", since(t))
            for child in r.json():
                kid = child["sandbox"]["sandboxID"]
                out = c.post(f"/sandboxes/{kid}/exec", json={"cmd": f"cat {STATE}"}).json()
                assert out["stdout"] == "api\n", out
                assert c.delete(f"/sandboxes/{kid}").status_code == 204
        assert c.delete(f"/sandboxes/{sid}").status_code == 204


def dataplane_part(n: int, work: Path) -> None:
    """The fair data plane (process runtime): 40 hung ``sleep 1000`` execs on one sandbox, then
    another sandbox's exec and the kill of the first, timed."""
    import threading

    from fastapi.testclient import TestClient

    from services.sandbox.app import create_app
    from shared.settings import load_settings

    settings = load_settings(data_dir=work / "fair", sandbox={"runtime": "process",
                             "reaper_interval_s": 3600})  # fmt: skip
    with TestClient(create_app(settings, background=False)) as c:
        for _ in range(n):
            a, b = (c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0})
                    .json()["sandboxID"] for _ in range(2))  # fmt: skip
            body = {"cmd": "sleep 1000", "timeout_s": 0}
            hung = [threading.Thread(target=c.post, args=(f"/sandboxes/{a}/exec",),
                                     kwargs={"json": body}, daemon=True) for _ in range(40)]  # fmt: skip
            for th in hung:
                th.start()
            time.sleep(1.0)  # let them all reach the guest (or their 429)
            t = time.perf_counter()
            r = c.post(f"/sandboxes/{b}/exec", json={"cmd": "echo b"})
            assert r.status_code == 200, r.text
            rec("fair: other sandbox's exec with 40 hung on one", since(t), "acceptance < 2 s")
            t = time.perf_counter()
            assert c.delete(f"/sandboxes/{a}").status_code == 204
            rec("fair: kill of the sandbox with 40 hung execs", since(t))
            for th in hung:
                th.join(60)
            c.delete(f"/sandboxes/{b}")


def docker_part(n: int, work: Path) -> None:
    """The docker runtime beside microvm: create, exec round trip, commit checkpoint,
    pause/resume (commit + the freezer, a background process kept), restore from the commit,
    fork x3 (files only: ``memory_checkpoint`` is false), exec after a fork bomb and after a
    command killed for memory."""
    from services.sandbox.runtime.base import ExecRequest, SandboxSpec
    from services.sandbox.runtime.docker import CHECKPOINT_REPO, DockerRuntime

    rt = DockerRuntime(work / "docker")
    ok, why = rt.available()
    if not ok:
        raise RuntimeError(why)
    rt.image_for("busybox")  # imported once, not timed
    made: list[str] = []
    live: list = []  # every container made, destroyed even when a part fails
    try:
        for i in range(n):
            t = time.perf_counter()
            h = rt.create(f"bench{i}", SandboxSpec(), work / f"d{i}")
            live.append(h)
            rec("docker create (container from the imported template)", since(t))
            t = time.perf_counter()
            assert rt.exec(h, ExecRequest(argv=["true"])).exit_code == 0
            rec("docker exec round trip (true)", since(t))
            rt.write_file(h, STATE, b"docker\n")
            t = time.perf_counter()
            ck = rt.checkpoint(h, None, None)
            made.append(ck.id)
            rec("docker checkpoint (docker commit)", since(t), "filesystem only")
            bg = rt.exec(h, ExecRequest(cmd="sleep 600", background=True)).pid
            t = time.perf_counter()
            pause_ck = rt.checkpoint(h, ck, None)  # what the service's pause does: commit, freeze
            made.append(pause_ck.id)
            rt.freeze(h)
            rt.thaw(h)
            assert rt.exec(h, ExecRequest(cmd=f"kill -0 {bg}")).exit_code == 0
            rec("docker pause + resume (commit + freezer, to first exec; process kept)", since(t))
            t = time.perf_counter()
            rt.stop(h)
            h = rt.restore(f"bench{i}", [ck], None, work / f"d{i}")
            live.append(h)
            assert rt.read_file(h, STATE) == b"docker\n"
            rec("docker restore (commit image -> new container, to first read)", since(t))
            t = time.perf_counter()
            kids = [rt.restore(f"bench{i}k{k}", [ck], None, work / f"d{i}k{k}") for k in range(3)]
            live += kids
            assert all(rt.read_file(k, STATE) == b"docker\n" for k in kids)
            rec("docker fork x3 (3 containers from the commit, to first read)", since(t))
            # the hog first: the bomb keeps running, and with its memory the container's
            # own limit (not the command's) would end the hog
            rec("docker exec after a command killed for memory", docker_after_hog(rt, h))
            rec("docker exec after a background fork bomb", docker_after_bomb(rt, h))
    finally:
        for k in live:
            rt.destroy(k)
        for ck_id in made:
            subprocess.run(["docker", "rmi", "-f", f"{CHECKPOINT_REPO}:{ck_id}"],
                           capture_output=True)  # fmt: skip


def docker_after_bomb(rt, h) -> float:  # type: ignore[no-untyped-def]
    """ms of ``true`` once a background fork bomb holds its own command cgroup full."""
    from services.sandbox.runtime.docker_cgroups import PREFIX, container_cgroup

    parent = container_cgroup(h.pid)
    bomb = "b(){ b | b & }; while :; do command eval b; command eval 'sleep 1'; done"
    rt.exec(h, ExecRequest(cmd=bomb, background=True))  # re-armed: it holds its cgroup full
    deadline = time.monotonic() + 60
    while parent is not None and time.monotonic() < deadline:
        counts = [int((cg / "pids.current").read_text()) for cg in parent.glob(f"{PREFIX}*")]
        if counts and max(counts) >= rt.cgroups.pids_max - 64 - 4:
            break
        time.sleep(0.05)
    t = time.perf_counter()
    assert rt.exec(h, ExecRequest(argv=["true"])).exit_code == 0
    return since(t)


def docker_after_hog(rt, h) -> float:  # type: ignore[no-untyped-def]
    """ms of ``true`` right after a command allocating past its memory share was OOM-killed."""
    hog = rt.exec(h, ExecRequest(cmd="dd if=/dev/zero of=/dev/null bs=230M count=1", timeout_s=60))
    assert hog.exit_code == 137 and "out of memory" in hog.stderr, hog
    t = time.perf_counter()
    assert rt.exec(h, ExecRequest(argv=["true"])).exit_code == 0
    return since(t)


failed: dict[str, str] = {}


def guarded(name: str, fn, *args) -> None:  # type: ignore[no-untyped-def]
    """Run one part; a failure is reported (and kept for the summary), the rest still runs."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - a bench reports, it does not stop
        failed[name] = f"{type(exc).__name__}: {exc}"[:300]
        print(f"\n!! {name} FAILED: {failed[name]}", flush=True)
        traceback.print_exc(limit=3)


def ratio(a: str, b: str, med: dict[str, float]) -> str:
    if a not in med or b not in med:
        return "n/a (" + "; ".join(f"{k} failed" for k in (a, b) if k not in med) + ")"
    return f"{med[a] / med[b]:.1f}x"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory-mb", type=int, default=256)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="k3s-bench-"))
    try:
        guarded("microvm runtime", runtime_part, args.runs, args.memory_mb, work)
        guarded("microvm API", api_part, args.runs, args.memory_mb, work)
        guarded("fair data plane", dataplane_part, min(args.runs, 3), work)
        guarded("docker runtime", docker_part, args.runs, work)
    finally:
        BenchRuntime.end_all()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'operation':62s} {'median':>9s}   (load avg now {os.getloadavg()[0]:.1f})")
    for k, v in res.items():
        unit = "" if "TCG blocks" in k or "hellos" in k else " ms"
        print(f"{k:62s} {statistics.median(v):9.1f}{unit}  {notes.get(k, '')}")
    print(f"\n{'checkpoint bytes':62s} {'median':>9s}")
    for k, v in nbytes.items():
        print(f"{k:62s} {statistics.median(v) / 2**20:7.2f} MiB")
    med = {k: statistics.median(v) for k, v in res.items()}
    full, incr = "BASELINE QEMU full snapshot (all RAM)", "checkpoint incr 1% dirty"
    print(f"\nQEMU full snapshot / incr 1% checkpoint: {ratio(full, incr, med)}")
    full, warm = (
        "BASELINE QEMU full restore (process start to hello)",
        "restore to hello (warm pool)",
    )
    print(f"QEMU full restore / restore to hello (warm pool): {ratio(full, warm, med)}")
    for name, why in failed.items():
        print(f"FAILED part (its rows are missing above): {name}: {why}")
    print("AgentENV (Firecracker, KVM) figures to compare: checkpoint 133 ms, restore 49 ms")


if __name__ == "__main__":
    main()
