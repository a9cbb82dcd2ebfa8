"""Reading a process's private copy-on-write mapping of a base file (``microvm/memory.py``),
without a VM: a child process maps a base file ``MAP_PRIVATE`` (as QEMU does for a restored
guest) and writes some pages; the reader must find exactly those pages and their contents."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from services.sandbox.pagestore import PAGE_SIZE, PageStore, page_hashes
from services.sandbox.runtime.microvm.memory import BaseFiles, PrivateMemory
from shared.objectstore import LocalObjectStore

NPAGES = 64
CHILD = """
import mmap, sys
path, size = sys.argv[1], int(sys.argv[2])
f = open(path, "r+b")
m = mmap.mmap(f.fileno(), size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
sum(m[i * 4096] for i in range(size // 4096))  # read every page: file pages, not copies
m[3 * 4096 : 4 * 4096] = b"x" * 4096
m[7 * 4096 + 10] = 0x55
m[40 * 4096 : 41 * 4096] = bytes(4096)  # a page written to zero
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def base(tmp_path):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    pages = rng.integers(0, 256, (NPAGES, PAGE_SIZE), dtype=np.uint8)
    pages[20:30] = 0  # holes
    ps = PageStore(LocalObjectStore(tmp_path / "objects"))
    base_map, _ = ps.save_layer(pages, page_hashes(pages), None, "ck0/pagemap")
    bases = BaseFiles(tmp_path / "base")
    assert bases.ensure("ck0", base_map, ps, NPAGES * PAGE_SIZE)
    assert not bases.ensure("ck0", base_map, ps, NPAGES * PAGE_SIZE)  # assembled once
    assert bases.path("ck0").read_bytes() == pages.tobytes()
    return ps, base_map, pages, bases


def test_dirty_pages_and_capture_of_a_private_mapping(base, tmp_path):  # type: ignore[no-untyped-def]
    ps, base_map, pages, bases = base
    link = tmp_path / "vm.mem"
    bases.link("ck0", link)
    size = NPAGES * PAGE_SIZE
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(link), str(size)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        mem = PrivateMemory(child.pid, link, size, "ck0/pagemap")
        mem.check_access()
        assert mem.dirty().tolist() == [3, 7, 40]
        want = pages.copy()
        want[3] = ord("x")
        want[7, 10] = 0x55
        want[40] = 0
        for parent in (base_map, None):  # incremental over the base, and full
            got, hashes = mem.capture(ps, parent)
            assert (hashes == page_hashes(want)).all()
            new_map, stats = ps.save_layer(got, hashes, parent, "ck1/pagemap")
            assert (ps.read_memory(new_map) == want).all()
            if parent is not None:
                assert stats.changed_pages == 3
        assert bases.path("ck0").read_bytes() == pages.tobytes()  # the base is untouched
    finally:
        child.kill()
        child.wait()


def test_unused_bases_are_evicted_oldest_first(base, tmp_path):  # type: ignore[no-untyped-def]
    ps, base_map, _, bases = base
    bases.keep_unused = 2
    link = tmp_path / "vm.mem"
    bases.link("ck0", link)  # in use: never evicted
    for name in ("a", "b", "c"):
        bases.ensure(name, base_map, ps, NPAGES * PAGE_SIZE)
    assert sorted(p.stem for p in bases.root.glob("*.mem")) == ["b", "c", "ck0"]
    files, freed = bases.collect(grace_s=0)
    assert files == 2 and freed >= 2 * (NPAGES - 10) * PAGE_SIZE  # holes take no space
    assert sorted(p.stem for p in bases.root.glob("*.mem")) == ["ck0"]
    bases.ensure("d", base_map, ps, NPAGES * PAGE_SIZE)
    bases.close()  # removes what it assembled unless a VM maps it
    assert sorted(p.stem for p in bases.root.glob("*.mem")) == ["ck0"]
    link.unlink()
    bases.close()  # ck0 was assembled by this instance too; now unused
    assert not list(bases.root.glob("*.mem"))
