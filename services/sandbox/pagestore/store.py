"""Content-addressed, deduplicated storage of guest memory pages in the object store.

Layout (all under ``prefix``, default ``pagestore/``):

* ``packs/<pack>.pages`` - the new page contents of one checkpoint, concatenated (4 KiB each);
* ``packs/<pack>.keys``  - their 16-byte content keys, in the same order;
* a **page map** per checkpoint (key chosen by the caller): for every guest page its XXH3-64
  hash (0 = zero page) and where its content lives (pack number, page index in the pack).

A page map is complete (it describes all of guest memory, inheriting unchanged entries from
the parent's map), so a restore reads one map however long the chain is, and the next
incremental checkpoint compares against one hash array. Zero pages cost nothing. A page whose
content key is already in any pack (this sandbox's earlier layers, another sandbox booted from
the same image, a sibling fork) is not stored again: dedup is global across the store.

Content key = XXH3-128 of the page, seeded with a per-store random secret kept at
``<prefix>secret`` (so keys are not predictable by a guest that does not know the secret).
It is not a cryptographic MAC: a tenant able to read the secret could forge collisions.

Packs are immutable and never deleted here: the service's garbage collection deletes packs no
reachable page map names (serialised with its own checkpoints), then calls
:meth:`PageStore.forget_packs`. The in-memory key index is filled from ``packs/*.keys`` on first
use; a second process writing the same store only costs missed dedup, never wrong data (as
long as it does not checkpoint while another process collects garbage in the same store).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from services.sandbox.pagestore.hashing import PAGE_SIZE, gather_pages

MAP_MAGIC = b"K3PM1\n"


@dataclass
class PageMap:
    """Where every page of one checkpoint's memory lives.

    ``hashes[i]``: XXH3-64 of page i (0 = zero). ``pack[i]``: index into ``packs`` (-1 =
    zero page). ``offset[i]``: page index inside that pack."""

    hashes: np.ndarray  # uint64[npages]
    pack: np.ndarray  # int32[npages]
    offset: np.ndarray  # uint32[npages]
    packs: list[str] = field(default_factory=list)

    @property
    def npages(self) -> int:
        return len(self.hashes)

    @classmethod
    def empty(cls, npages: int) -> PageMap:
        return cls(
            hashes=np.zeros(npages, np.uint64),
            pack=np.full(npages, -1, np.int32),
            offset=np.zeros(npages, np.uint32),
        )

    def to_bytes(self) -> bytes:
        head = json.dumps({"npages": self.npages, "packs": self.packs}).encode()
        body = zlib.compress(self.hashes.tobytes() + self.pack.tobytes() + self.offset.tobytes(), 1)
        return MAP_MAGIC + len(head).to_bytes(4, "big") + head + body

    @classmethod
    def from_bytes(cls, data: bytes) -> PageMap:
        if not data.startswith(MAP_MAGIC):
            raise ValueError("not a page map")
        n = int.from_bytes(data[6:10], "big")
        head = json.loads(data[10 : 10 + n])
        raw = zlib.decompress(data[10 + n :])
        np_ = head["npages"]
        hashes = np.frombuffer(raw, np.uint64, np_, 0).copy()
        pack = np.frombuffer(raw, np.int32, np_, 8 * np_).copy()
        offset = np.frombuffer(raw, np.uint32, np_, 12 * np_).copy()
        return cls(hashes=hashes, pack=pack, offset=offset, packs=list(head["packs"]))


@dataclass
class LayerStats:
    total_pages: int = 0
    nonzero_pages: int = 0
    changed_pages: int = 0
    new_pages: int = 0
    stored_bytes: int = 0
    key_ms: float = 0.0
    store_ms: float = 0.0


def _local_path(store, key: str) -> Path | None:
    """Filesystem path of ``key`` when ``store`` is a local directory store, else None."""
    path_of = getattr(store, "_path", None)
    if path_of is None:
        return None
    try:
        p = Path(path_of(key))
    except Exception:
        return None
    return p if p.exists() else None


class PageStore:
    """Checkpoint layers of guest memory in an object store (see module docstring)."""

    def __init__(self, store, prefix: str = "pagestore/") -> None:
        self.store = store
        self.prefix = prefix
        self._lock = threading.Lock()
        self._index: dict[bytes, tuple[str, int]] | None = None
        self._seed: int | None = None
        self._maps: OrderedDict[str, PageMap] = OrderedDict()
        self._packs: OrderedDict[str, np.ndarray] = OrderedDict()

    # ------------------------------------------------------------------ index

    def _secret_seed(self) -> int:
        if self._seed is None:
            key = f"{self.prefix}secret"
            try:
                raw = self.store.get(key)
            except KeyError:
                self.store.put(key, secrets.token_bytes(8))
                raw = self.store.get(key)
            self._seed = int.from_bytes(raw[:8], "little")
        return self._seed

    def _load_index(self) -> dict[bytes, tuple[str, int]]:
        if self._index is None:
            index: dict[bytes, tuple[str, int]] = {}
            for info in self.store.list(f"{self.prefix}packs/"):
                if not info.key.endswith(".keys"):
                    continue
                pack = info.key.rsplit("/", 1)[1][: -len(".keys")]
                keys = self.store.get(info.key)
                for i in range(len(keys) // 16):
                    index.setdefault(keys[16 * i : 16 * i + 16], (pack, i))
            self._index = index
        return self._index

    def forget_packs(self, packs: set[str]) -> None:
        """Packs were deleted (garbage collection): never dedup against them again."""
        with self._lock:
            if self._index is not None:
                self._index = {k: v for k, v in self._index.items() if v[0] not in packs}
            for pack in packs:
                self._packs.pop(pack, None)

    def content_key(self, page) -> bytes:
        return xxhash.xxh3_128_digest(page, seed=self._secret_seed())

    # ------------------------------------------------------------------ save

    def save_layer(
        self,
        pages: np.ndarray,
        hashes: np.ndarray,
        parent: PageMap | None,
        map_key: str,
    ) -> tuple[PageMap, LayerStats]:
        """Store the pages of ``pages`` (uint8 ``[npages, 4096]``, e.g. a mapping of the
        memory file of a stopped VM) that changed since ``parent`` and write the new map.

        ``hashes`` are the current page hashes (``page_hashes`` / ``file_page_hashes``).
        Returns the new map and what this layer cost."""
        npages = len(hashes)
        if pages.shape != (npages, PAGE_SIZE):
            raise ValueError(f"pages must be [{npages}, {PAGE_SIZE}], got {pages.shape}")
        if parent is not None and parent.npages != npages:
            raise ValueError(f"parent map has {parent.npages} pages, memory has {npages}")
        stats = LayerStats(total_pages=npages, nonzero_pages=int(np.count_nonzero(hashes)))
        base = parent or PageMap.empty(npages)
        changed = np.flatnonzero(hashes != base.hashes)
        stats.changed_pages = len(changed)
        t0 = time.perf_counter()
        new = PageMap(
            hashes=hashes.copy(),
            pack=base.pack.copy(),
            offset=base.offset.copy(),
            packs=list(base.packs),
        )
        pack_no = {p: i for i, p in enumerate(new.packs)}
        new_pack = uuid.uuid4().hex
        new_pages: list[int] = []
        new_keys: list[bytes] = []
        seed = self._secret_seed()
        with self._lock:
            index = self._load_index()
            pending: dict[bytes, int] = {}
            for i in changed.tolist():
                if hashes[i] == 0:
                    new.pack[i] = -1
                    new.offset[i] = 0
                    continue
                k = xxhash.xxh3_128_digest(pages[i], seed=seed)
                hit = index.get(k)
                if hit is None:
                    j = pending.get(k)
                    if j is None:
                        j = pending[k] = len(new_pages)
                        new_pages.append(i)
                        new_keys.append(k)
                    hit = (new_pack, j)
                pack, off = hit
                if pack not in pack_no:
                    pack_no[pack] = len(new.packs)
                    new.packs.append(pack)
                new.pack[i] = pack_no[pack]
                new.offset[i] = off
            stats.key_ms = (time.perf_counter() - t0) * 1000
            t1 = time.perf_counter()
            if new_pages:
                idx = np.asarray(new_pages, dtype=np.int64)
                body = np.empty((len(idx), PAGE_SIZE), np.uint8)
                gather_pages(body, np.arange(len(idx)), pages, idx)
                self.store.put(f"{self.prefix}packs/{new_pack}.pages", body.data)
                keys = b"".join(new_keys)
                self.store.put(f"{self.prefix}packs/{new_pack}.keys", keys)
                stats.stored_bytes += body.nbytes + len(keys)
                for j, k in enumerate(new_keys):
                    index[k] = (new_pack, j)
            stats.new_pages = len(new_pages)
        # drop packs no page references any more (keeps maps small over long chains)
        used = np.unique(new.pack[new.pack >= 0])
        if len(used) < len(new.packs):
            remap = np.full(len(new.packs), -1, np.int32)
            remap[used] = np.arange(len(used), dtype=np.int32)
            new.packs = [new.packs[i] for i in used.tolist()]
            new.pack = np.where(new.pack >= 0, remap[np.maximum(new.pack, 0)], -1).astype(np.int32)
        blob = new.to_bytes()
        self.store.put(map_key, blob)
        stats.stored_bytes += len(blob)
        stats.store_ms = (time.perf_counter() - t1) * 1000
        self._remember_map(map_key, new)
        return new, stats

    # ------------------------------------------------------------------ load

    def _remember_map(self, key: str, m: PageMap) -> None:
        with self._lock:
            self._maps[key] = m
            self._maps.move_to_end(key)
            while len(self._maps) > 16:
                self._maps.popitem(last=False)

    def load_map(self, key: str) -> PageMap:
        with self._lock:
            m = self._maps.get(key)
        if m is None:
            m = PageMap.from_bytes(self.store.get(key))
            self._remember_map(key, m)
        return m

    def _pack_pages(self, pack: str) -> np.ndarray:
        """A pack's pages as a read-only ``[n, 4096]`` array (mmap of the local file when the
        store is a local directory, else downloaded once and kept)."""
        with self._lock:
            arr = self._packs.get(pack)
        if arr is not None:
            return arr
        key = f"{self.prefix}packs/{pack}.pages"
        path = _local_path(self.store, key)
        if path is not None:
            arr = np.memmap(path, dtype=np.uint8, mode="r").reshape(-1, PAGE_SIZE)
        else:
            arr = np.frombuffer(self.store.get(key), np.uint8).reshape(-1, PAGE_SIZE)
        with self._lock:
            self._packs[pack] = arr
            while len(self._packs) > 256:
                self._packs.popitem(last=False)
        return arr

    def materialize(self, m: PageMap, dst: np.ndarray, only: np.ndarray | None = None) -> int:
        """Write the memory described by ``m`` into ``dst`` (uint8 ``[npages, 4096]``, e.g. a
        shared mapping of a new sparse memory file). Zero pages are not written (the file is
        expected to be zero there). ``only``: restrict to these page numbers. Returns the
        number of pages written."""
        sel = np.flatnonzero(m.pack >= 0) if only is None else only[m.pack[only] >= 0]
        if not len(sel):
            return 0
        packs = m.pack[sel]
        order = np.argsort(packs, kind="stable")
        sel, packs = sel[order], packs[order]
        bounds = np.flatnonzero(np.diff(packs)) + 1
        for group in np.split(np.arange(len(sel)), bounds):
            pno = int(packs[group[0]])
            src = self._pack_pages(m.packs[pno])
            gather_pages(dst, sel[group], src, m.offset[sel[group]].astype(np.int64))
        return len(sel)

    def read_memory(self, m: PageMap) -> np.ndarray:
        """The full memory of ``m`` as a new array (tests, debugging)."""
        out = np.zeros((m.npages, PAGE_SIZE), np.uint8)
        self.materialize(m, out)
        return out


def write_sparse_file(path: str | os.PathLike, size: int) -> None:
    """Create ``path`` as a sparse file of ``size`` bytes (all holes)."""
    with open(path, "wb") as fh:
        fh.truncate(size)


class PageStores:
    """One :class:`PageStore` per object store, for a runtime that may be handed several, and
    what garbage collection needs of them: the pack objects a page map references, and
    forgetting packs once they are deleted (so nothing deduplicates against them again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[int, PageStore] = {}

    def of(self, store) -> PageStore:
        with self._lock:
            ps = self._stores.get(id(store))
            if ps is None or ps.store is not store:
                ps = self._stores[id(store)] = PageStore(store)
            return ps

    def referenced(self, store, map_key: str | None) -> set[str]:
        """Keys of the packs (pages and keys) the page map at ``map_key`` uses."""
        if not map_key:
            return set()
        ps = self.of(store)
        keys: set[str] = set()
        for pack in ps.load_map(map_key).packs:
            keys.add(f"{ps.prefix}packs/{pack}.pages")
            keys.add(f"{ps.prefix}packs/{pack}.keys")
        return keys

    def forget(self, keys: set[str]) -> None:
        """These objects were deleted: drop the packs among them from every index."""
        with self._lock:
            stores = list(self._stores.values())
        for ps in stores:
            pfx = f"{ps.prefix}packs/"
            packs = {k[len(pfx) :].rsplit(".", 1)[0] for k in keys if k.startswith(pfx)}
            if packs:
                ps.forget_packs(packs)


__all__ = ["LayerStats", "PageMap", "PageStore", "PageStores", "write_sparse_file"]
