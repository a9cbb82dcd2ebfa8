"""Instance isolation in ``/dev/shm`` (issue 24): each service instance keeps its memory files
in its own folder, removes what a crashed predecessor left there (files no process maps), keeps
a surviving QEMU's file (it is mapped: re-attach needs it), and never touches another
instance's folder. A child process mapping a file stands for a surviving QEMU."""

from __future__ import annotations

import shutil
import subprocess
import sys

from services.sandbox.runtime.microvm.memory import instance_key, shm_dir, sweep_stale
from tests.sandbox.waiting import eventually

MAPPER = """
import mmap, sys, time
f = open(sys.argv[1], "r+b")
m = mmap.mmap(f.fileno(), 4096)
print("mapped", flush=True)
time.sleep(120)
"""


def test_sweep_removes_only_this_instances_unmapped_files(tmp_path):  # type: ignore[no-untyped-def]
    mine, other = shm_dir(instance_key(tmp_path / "a")), shm_dir(instance_key(tmp_path / "b"))
    assert mine != other and mine.parent == other.parent
    try:
        (mine / "base").mkdir(exist_ok=True)
        stale, base, live = mine / "dead.mem", mine / "base" / "ck1.mem", mine / "alive.mem"
        theirs = other / "theirs.mem"
        for p in (stale, base, live, theirs):
            p.write_bytes(b"\0" * 4096)
        child = subprocess.Popen([sys.executable, "-c", MAPPER, str(live)],
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "mapped"
            assert sweep_stale(mine) == 2
            assert not stale.exists() and not base.exists()  # the crashed predecessor's
            assert live.exists()  # mapped by a surviving process: kept for re-attach
            assert theirs.exists()  # another instance's: never touched
        finally:
            child.kill()
            child.wait()
        eventually(lambda: sweep_stale(mine), lambda n: n == 1, what="the unmapped file swept")
        assert not live.exists() and theirs.exists()
    finally:
        shutil.rmtree(mine, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
