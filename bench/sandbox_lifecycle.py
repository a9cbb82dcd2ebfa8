"""Sandbox lifecycle latency of the microvm runtime, with QEMU's own snapshot as baseline.

Prints the median of N runs (default 5) for: create (boot to agent), exec round trip, full
checkpoint, incremental checkpoint with 1% and 10% of guest pages dirtied, restore (cold QEMU
start and with a warm pool), fork (checkpoint + 1 restore per child), pause (checkpoint + stop),
resume (restore), checkpoint bytes; then QEMU's full snapshot (migration of all RAM to a file)
and full restore of the same guest, and ratios. Busybox image, 256 MiB guest.

    .venv/bin/python bench/sandbox_lifecycle.py [--runs 5] [--memory-mb 256]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from services.sandbox.runtime.base import ExecRequest, SandboxSpec
from services.sandbox.runtime.microvm import MicroVMRuntime
from shared.objectstore import LocalObjectStore


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def dirty(rt, h, fraction: float, memory_mb: int) -> None:
    """Rewrite ~fraction of guest RAM: a tmpfs file of random bytes (overwritten each time)."""
    kib = int(memory_mb * 1024 * fraction)
    rt.exec(h, ExecRequest(cmd=f"head -c {kib}k /dev/urandom > /tmp/dirty", timeout_s=60))


def qemu_baseline(rt: MicroVMRuntime, h, work: Path) -> tuple[float, float]:
    """QEMU's own full snapshot (all RAM through migration to a file) and full restore."""
    live = rt._live[h.sandbox_id]  # noqa: SLF001 - bench pokes at the runtime on purpose
    path = work / "full.mig"
    t = time.perf_counter()
    live.qmp.execute("migrate", uri=f"exec:cat > {path}")
    while (live.qmp.execute("query-migrate") or {}).get("status") not in ("completed", "failed"):
        time.sleep(0.002)
    save = time.perf_counter() - t
    live.qmp.execute("cont")
    # restore: a fresh QEMU with private RAM (not the shared file) loading the whole stream
    from services.sandbox.images.builder import get_image

    image = get_image("busybox")
    spec = h.spec
    vm = rt._launch(image, spec, rt.accel, incoming=True)  # noqa: SLF001
    try:
        t = time.perf_counter()
        vm.qmp.execute("migrate-incoming", uri=f"exec:cat {path}")
        while (vm.qmp.execute("query-migrate") or {}).get("status") not in ("completed", "failed"):
            time.sleep(0.002)
        vm.qmp.execute("cont")
        load = time.perf_counter() - t
    finally:
        rt._kill_vm(vm.proc, vm.qmp, vm.mem_path)  # noqa: SLF001
        shutil.rmtree(vm.sock_dir, ignore_errors=True)
        path.unlink(missing_ok=True)
    return save, load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory-mb", type=int, default=256)
    args = ap.parse_args()
    n, mem = args.runs, args.memory_mb
    work = Path(tempfile.mkdtemp(prefix="k3s-bench-"))
    store = LocalObjectStore(work / "objects")
    rt = MicroVMRuntime()
    ok, why = rt.available()
    if not ok:
        raise SystemExit(f"microvm unavailable: {why} (run scripts/setup_sandbox.sh)")
    spec = SandboxSpec(memory_mb=mem)
    res: dict[str, list[float]] = {}
    nbytes: dict[str, list[int]] = {}

    def rec(name: str, seconds: float) -> None:
        res.setdefault(name, []).append(seconds * 1000)

    print(f"accel={rt.accel} runs={n} memory={mem} MiB", flush=True)
    handles = []
    for i in range(n):
        t = time.perf_counter()
        handles.append(rt.create(f"bench-{i}", spec, work / f"vm{i}"))
        rec("create", time.perf_counter() - t)
        if i:
            rt.destroy(handles.pop(0))
    h = handles[0]
    for _ in range(max(n, 20)):
        t = time.perf_counter()
        rt.exec(h, ExecRequest(argv=["true"]))
        rec("exec round trip", time.perf_counter() - t)
    rt.exec(h, ExecRequest(cmd="i=0; while true; do i=$((i+1)); sleep 0.1; done", background=True))
    rt.write_file(h, "/home/user/bench-state", b"restored state\n")
    for _ in range(n):  # the exec timed after restores, here in a VM that has run it before
        t = time.perf_counter()
        assert rt.exec(h, ExecRequest(argv=["cat", "/home/user/bench-state"])).exit_code == 0
        rec("cat exec in a running VM (baseline for first exec)", time.perf_counter() - t)
    chain = []
    for i in range(n):
        fresh = LocalObjectStore(work / f"fresh{i}")
        t = time.perf_counter()
        ck = rt.checkpoint(h, None, fresh)
        rec("checkpoint full (empty store)", time.perf_counter() - t)
        nbytes.setdefault("checkpoint full (empty store)", []).append(ck.stored_bytes)
        shutil.rmtree(work / f"fresh{i}", ignore_errors=True)
    for _ in range(n):
        t = time.perf_counter()
        ck = rt.checkpoint(h, None, store)
        rec("checkpoint full (pages deduped in store)", time.perf_counter() - t)
        nbytes.setdefault("checkpoint full (pages deduped in store)", []).append(ck.stored_bytes)
        chain = [ck]
    for frac in (0.01, 0.10):
        name = f"checkpoint incr {int(frac * 100)}% dirty"
        for _ in range(n):
            dirty(rt, h, frac, mem)
            t = time.perf_counter()
            ck = rt.checkpoint(h, chain[-1], store)
            rec(name, time.perf_counter() - t)
            rec(name + " (downtime)", ck.stats["downtime_ms"] / 1000)
            nbytes.setdefault(name, []).append(ck.stored_bytes)
            chain.append(ck)
    base = [chain[0], *chain[1:]]
    for _ in range(n):
        t = time.perf_counter()
        r = rt.restore("bench-r", base, store, work / "r")
        rec("restore (cold QEMU start)", time.perf_counter() - t)
        rt.destroy(r)
    rt.pool_size = 1
    rt.prewarm(spec)
    for _ in range(n):
        time.sleep(0.3)  # let the pool refill in the background, as between requests
        while not rt._pool:  # noqa: SLF001
            time.sleep(0.05)
        t = time.perf_counter()
        r = rt.restore("bench-r", base, store, work / "r")
        rec("restore (warm pool) = restore to agent hello", time.perf_counter() - t)
        out = rt.exec(r, ExecRequest(argv=["cat", "/home/user/bench-state"]))
        rec("restore to first exec (warm pool)", time.perf_counter() - t)
        assert out.stdout == "restored state\n", f"restored state wrong: {out}"  # every run
        t2 = time.perf_counter()
        rt.exec(r, ExecRequest(argv=["cat", "/home/user/bench-state"]))
        rec("second exec after restore", time.perf_counter() - t2)
        rt.destroy(r)
    for _ in range(n):
        t = time.perf_counter()
        ck = rt.checkpoint(h, chain[-1], store)
        kids = [rt.restore(f"bench-k{j}", [*chain, ck], store, work / f"k{j}") for j in range(3)]
        rec("fork x3 (checkpoint + 3 restores)", time.perf_counter() - t)
        chain.append(ck)
        for k in kids:
            rt.destroy(k)
    rt.pool_size = 0
    rt.close()
    p = rt.restore("bench-p", chain, store, work / "p")
    pchain = list(chain)
    for _ in range(n):
        t = time.perf_counter()
        ck = rt.checkpoint(p, pchain[-1], store)
        rt.stop(p)
        rec("pause (checkpoint + stop)", time.perf_counter() - t)
        pchain.append(ck)
        t = time.perf_counter()
        p = rt.restore("bench-p", pchain, store, work / "p")
        rec("resume (restore, cold QEMU)", time.perf_counter() - t)
    save, load = [], []
    for _ in range(n):
        s, lo = qemu_baseline(rt, p, work)
        save.append(s * 1000)
        load.append(lo * 1000)
    rt.destroy(p)
    rt.destroy(h)
    print(f"\n{'operation':44s} {'median ms':>10s}")
    for k, v in res.items():
        print(f"{k:44s} {med(v):10.1f}")
    print(f"\n{'checkpoint bytes':44s} {'median':>10s}")
    for k, v in nbytes.items():
        print(f"{k:44s} {med(v) / 2**20:8.2f} MiB")
    print(f"\nbaseline (QEMU full snapshot, all RAM)       {med(save):10.1f}")
    print(f"baseline (QEMU full restore)                 {med(load):10.1f}")
    incr = med(res["checkpoint incr 1% dirty"])
    print(f"ratio QEMU full snapshot / incr 1% checkpoint  {med(save) / incr:6.1f}x")
    print(
        f"ratio QEMU full restore / warm-pool restore    {med(load) / med(res['restore (warm pool) = restore to agent hello']):6.1f}x"
    )
    print("AgentENV (Firecracker, KVM) figures to beat: checkpoint 133 ms, restore 49 ms")
    shutil.rmtree(work, ignore_errors=True)
    os.sync()


if __name__ == "__main__":
    main()
