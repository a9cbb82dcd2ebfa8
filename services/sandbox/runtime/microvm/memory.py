"""Guest RAM of a microVM: where it lives, how a restore gets it without copying, and how a
checkpoint reads it.

Two layouts:

* **Shared** (a freshly booted VM): a sparse per-VM file in ``/dev/shm/k3stack/<instance>`` that QEMU maps
  ``share=on`` and this process maps ``MAP_SHARED``; a checkpoint hashes the file in place
  (holes skipped). :class:`SharedMemory`.
* **Copy-on-write over a base** (a restored or forked VM): a checkpoint's memory is assembled
  once into a base file ``/dev/shm/k3stack/<instance>/base/<checkpoint id>.mem`` (named by the checkpoint:
  a checkpoint's memory never changes). Each VM restored from it gets a hard link to the base
  under its own name (so what a VM holds is still one path it owns and that ``stop`` removes)
  and QEMU maps it ``share=off`` (``MAP_PRIVATE``): pages the guest only reads stay the base's
  page-cache pages, shared by every VM restored from that checkpoint; a page the guest writes
  becomes a private anonymous copy in that QEMU. A restore copies nothing once the base exists.
  :class:`PrivateMemory`, :class:`BaseFiles`.

A private VM's writes are in no file, so a checkpoint reads them out of QEMU:
``/proc/<pid>/pagemap`` says, for each page of QEMU's RAM mapping, whether it is still the
file's page (bit 61) or a private copy (present without bit 61, or swapped out); the private
copies are read from ``/proc/<pid>/mem`` (this needs ptrace rights over QEMU: its parent, or
root), and every other page is the base's, whose hash is in the base checkpoint's page map. So
a checkpoint of a restored VM reads and hashes only what the guest wrote since the restore.

Bases cost RAM (tmpfs) while they exist. They are a cache (a later restore assembles a base
again): at most ``keep_unused`` that no VM maps are kept, the least recently restored go
first, :meth:`BaseFiles.collect` (garbage collection) removes unused ones past the grace
period, and a closing runtime removes the unused ones it assembled. Another process may remove a base between a restore's ``ensure`` and its ``link``
(the restore then assembles it again).
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from services.sandbox.pagestore import (
    PAGE_SIZE,
    PageMap,
    PageStore,
    file_page_hashes,
    page_hashes,
    write_sparse_file,
)

PM_PRESENT = 1 << 63
PM_SWAPPED = 1 << 62
PM_FILE = 1 << 61


def shm_dir(instance: str = "shared") -> Path:
    """This service instance's own folder of memory files, ``/dev/shm/k3stack/<instance>``
    (instance: a digest of the runtime's folder), so instances on one host never see, evict or
    remove each other's files."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
    d = base / "k3stack" / instance
    d.mkdir(parents=True, exist_ok=True)
    return d


def instance_key(root: Path) -> str:
    return hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:12]


def mapped_inodes(under: Path) -> set[int]:
    """Inodes of files under ``under`` that some process on the host maps (``/proc/*/maps``)."""
    prefix, out = str(under), set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:  # the process ended, or is not ours to read
            continue
        for line in text.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith(prefix):
                out.add(int(parts[4]))
    return out


def sweep_stale(shm: Path) -> int:
    """Remove what a crashed predecessor of this instance left in ``shm``: memory files no
    process maps (a QEMU that survived it still maps its own, which stay for re-attach).
    Returns the number of files removed."""
    keep, removed = mapped_inodes(shm), 0
    for path in [*shm.glob("*.mem"), *shm.glob("base/*.mem"), *shm.glob("base/.*.part")]:
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_ino not in keep:
                path.unlink()
                removed += 1
    return removed


def can_read_children() -> bool:
    """Whether this process may read the memory of QEMUs it starts (``/proc/<pid>/mem``):
    root, or Yama's ``ptrace_scope`` at most 1 (a parent may read its children)."""
    if os.geteuid() == 0:
        return True
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text()) <= 1
    except (OSError, ValueError):
        return True  # no Yama: classic ptrace rules, same uid


class SharedMemory:
    """A VM's RAM file mapped into this process (QEMU maps the same file ``share=on``)."""

    kind = "shared"

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR)
        size = os.fstat(self.fd).st_size
        self.map = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.pages: np.ndarray | None = np.frombuffer(self.map, dtype=np.uint8).reshape(
            -1, PAGE_SIZE
        )

    def capture(self, ps: PageStore, parent: PageMap | None) -> tuple[np.ndarray, np.ndarray]:
        """The VM's pages and their hashes (call with the vCPUs stopped)."""
        assert self.pages is not None
        return self.pages, file_page_hashes(self.fd, self.pages)

    def close(self) -> None:
        self.pages = None  # drop the buffer export so the map can close
        with contextlib.suppress(Exception):
            self.map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


class PrivateMemory:
    """A VM's RAM as a private copy-on-write mapping (in QEMU ``pid``) of the file ``path``,
    a link to the base that holds checkpoint memory described by the page map ``base_map_key``."""

    kind = "private"

    def __init__(self, pid: int, path: Path, size: int, base_map_key: str) -> None:
        self.pid, self.path, self.size, self.base_map_key = pid, Path(path), size, base_map_key
        self._addr: int | None = None
        self.last_stats: dict[str, float] = {}

    def ram_address(self) -> int:
        """Where QEMU mapped the file (``/proc/<pid>/maps``: the mapping of ``path`` at offset 0)."""
        if self._addr is None:
            names = (str(self.path), f"{self.path} (deleted)")
            for line in Path(f"/proc/{self.pid}/maps").read_text().splitlines():
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5] in names and int(parts[2], 16) == 0:
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    if hi - lo >= self.size:
                        self._addr = lo
                        break
            else:
                raise OSError(f"QEMU {self.pid} has no mapping of {self.path}")
        return self._addr

    def check_access(self) -> None:
        """Raise OSError unless this process may read QEMU's memory (ptrace rights)."""
        with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as fh:
            os.pread(fh.fileno(), 8, self.ram_address())

    def dirty(self) -> np.ndarray:
        """Page numbers the guest has written since the restore (private copies in QEMU)."""
        npages = self.size // PAGE_SIZE
        addr = self.ram_address()
        raw = bytearray(npages * 8)
        with open(f"/proc/{self.pid}/pagemap", "rb", buffering=0) as fh:
            _read_exact(fh.fileno(), memoryview(raw), (addr // PAGE_SIZE) * 8)
        flags = np.frombuffer(raw, dtype=np.uint64)
        present = (flags & np.uint64(PM_PRESENT)) != 0
        swapped = (flags & np.uint64(PM_SWAPPED)) != 0
        file_page = (flags & np.uint64(PM_FILE)) != 0
        return np.flatnonzero((present & ~file_page) | swapped)

    def capture(self, ps: PageStore, parent: PageMap | None) -> tuple[np.ndarray, np.ndarray]:
        """The VM's pages and their hashes (call with the vCPUs stopped). The array holds the
        pages the guest wrote, plus base pages that differ from ``parent``; the rest is zero
        (and never read by :meth:`PageStore.save_layer`, which only reads changed pages)."""
        t0 = time.perf_counter()
        base = ps.load_map(self.base_map_key)
        npages = self.size // PAGE_SIZE
        if base.npages != npages:
            raise ValueError(f"base map has {base.npages} pages, memory has {npages}")
        idx = self.dirty()
        t1 = time.perf_counter()
        pages = _zeros(npages)
        addr = self.ram_address()
        with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as fh:
            for start, end in _runs(idx):
                _read_exact(fh.fileno(), memoryview(pages[start:end]).cast("B"),
                            addr + start * PAGE_SIZE)  # fmt: skip
        t2 = time.perf_counter()
        hashes = base.hashes.copy()
        if len(idx):
            hashes[idx] = page_hashes(pages[idx])
        # base pages the parent lacks (no parent, or one not on this VM's line): read them too
        untouched = np.ones(npages, bool)
        untouched[idx] = False
        before = parent.hashes if parent is not None else np.zeros(npages, np.uint64)
        need = np.flatnonzero(untouched & (hashes != before) & (hashes != 0))
        if len(need):
            ps.materialize(base, pages, only=need)
        self.last_stats = {
            "dirty_pages": float(len(idx)),
            "pagemap_ms": (t1 - t0) * 1000,
            "read_ms": (t2 - t1) * 1000,
        }
        return pages, hashes

    def close(self) -> None:
        """Nothing is mapped here: QEMU's exit frees its private pages."""


def _zeros(npages: int) -> np.ndarray:
    """A zero ``[npages, 4096]`` array whose untouched pages cost nothing, in 4 KiB pages: with
    transparent huge pages the first byte written into each 2 MiB of a plain ``np.zeros``
    allocates (and may compact memory for) a whole huge page, which made reading a few
    hundred scattered pages take seconds."""
    buf = mmap.mmap(-1, npages * PAGE_SIZE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(AttributeError, OSError):
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=np.uint8).reshape(npages, PAGE_SIZE)


def _runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """Sorted page numbers as ``[start, end)`` runs of consecutive pages."""
    if not len(idx):
        return []
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = idx[np.r_[0, breaks]]
    ends = idx[np.r_[breaks - 1, len(idx) - 1]] + 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def _read_exact(fd: int, view: memoryview, offset: int) -> None:
    while len(view):
        n = os.preadv(fd, [view], offset)
        if n <= 0:
            raise OSError(f"short read at {offset:#x}")
        view, offset = view[n:], offset + n


class BaseFiles:
    """Base memory files, one per restored checkpoint, assembled once (see module docstring)."""

    def __init__(self, root: Path | None = None, keep_unused: int = 4) -> None:
        """``keep_unused``: bases no VM maps that are kept for later restores (most recently
        used first); assembling another evicts the oldest beyond it."""
        self.root = root or shm_dir() / "base"
        self.keep_unused = keep_unused
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self._made: set[Path] = set()

    def path(self, checkpoint_id: str) -> Path:
        return self.root / f"{checkpoint_id}.mem"

    def ensure(self, checkpoint_id: str, page_map: PageMap, ps: PageStore, size: int) -> bool:
        """Make sure the base of ``checkpoint_id`` exists; True if it was assembled now."""
        path = self.path(checkpoint_id)
        with self._lock:
            lock = self._building.setdefault(checkpoint_id, threading.Lock())
        with lock:
            if path.exists():
                with contextlib.suppress(OSError):
                    os.utime(path)  # recently used: collect() keeps it
                return False
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f".{checkpoint_id}.{uuid.uuid4().hex[:8]}.part"
            try:
                write_sparse_file(tmp, size)
                mem = SharedMemory(tmp)
                try:
                    assert mem.pages is not None
                    ps.materialize(page_map, mem.pages)
                finally:
                    mem.close()
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        with self._lock:
            self._building.pop(checkpoint_id, None)
            self._made.add(path)
        self._evict(keep=path)
        return True

    def _unused(self) -> list[tuple[float, Path, os.stat_result]]:
        """Bases no VM links (one name: the base's own), oldest use first."""
        out = []
        for path in self.root.glob("*.mem"):
            with contextlib.suppress(FileNotFoundError):
                st = path.stat()
                if st.st_nlink == 1:
                    out.append((st.st_mtime, path, st))
        return sorted(out)

    def _evict(self, keep: Path) -> None:
        unused = [u for u in self._unused() if u[1] != keep]
        for _, path, _ in unused[: max(0, len(unused) + 1 - self.keep_unused)]:
            path.unlink(missing_ok=True)

    def link(self, checkpoint_id: str, dest: Path) -> None:
        """Give a VM its own name for the base (QEMU maps the same inode, shared pages)."""
        os.link(self.path(checkpoint_id), dest)

    def close(self) -> None:
        """Remove the bases this instance assembled that no VM maps (the runtime is closing:
        nothing is left in ``/dev/shm`` by a process that has ended)."""
        with self._lock:
            made = list(self._made)
        for path in made:
            try:
                if path.stat().st_nlink > 1:
                    continue  # still mapped: a later close or collect removes it
                path.unlink()
            except FileNotFoundError:
                pass
            with self._lock:
                self._made.discard(path)

    def collect(self, grace_s: float) -> tuple[int, int]:
        """Remove bases no VM links and unused for ``grace_s``: (files, bytes freed)."""
        if not self.root.is_dir():
            return 0, 0
        files = freed = 0
        cutoff = time.time() - grace_s
        for mtime, path, st in self._unused():
            if mtime > cutoff:
                break
            path.unlink(missing_ok=True)
            files += 1
            freed += st.st_blocks * 512
        return files, freed


__all__ = [
    "BaseFiles",
    "can_read_children",
    "PrivateMemory",
    "SharedMemory",
    "instance_key",
    "shm_dir",
    "sweep_stale",
]
