"""The KDA-aware hybrid prefix cache (report §5.4.1) over the one paged pool.

Granularities are decoupled: MLA latent KV lives in large physical pages (``pool.page_tokens``,
6144 by default) while prefixes are hashed over fine *hash blocks* (``hash_block``, 512):
hash ``i`` chains all of blocks ``0..i``, so matching one endpoint proves the whole prefix up to
it. Every complete hash block registers its endpoint under the page holding it, so a partially
filled page is findable under the hash of its last complete block and its endpoint advances as
it fills. An endpoint's page always holds the whole page range up to that endpoint (the writer
filled it, or a copy-on-write copied it), so the page of the deepest matched endpoint is the one
to read.

KDA keeps one recurrent state per request, so a prefix is reusable only where a state snapshot
(a *checkpoint*: one read-only slot of a :class:`~.checkpoint_slab.CheckpointSlab`, sized to the
state, not a pool page; ``slab_bytes=0`` sizes the slab to the checkpoints the pool can reach) was taken. After every forward the state at a
hash-aligned end is snapshotted; a request's previous intermediate snapshot is recycled when a
newer one supersedes it, while snapshots at turn boundaries (``turn_end_ids`` from the chat
template; the hash endpoint at or before the boundary) are retained, and the scheduler ends
chunks there (:meth:`chunk_stop`) so those states exist. A hit copies the snapshot into the
request's KDA state slot; snapshots are never written.

Lookup has two stages: MLA walks pages by the hash at each page end and, at the first page not
wholly matched, the endpoints inside it; KDA then takes the deepest hash boundary within that
range holding a checkpoint (one slot holds every KDA group). Consistency: hit pages are pinned
(referenced) before anything is allocated, and a hit's slot is copied out before anything is;
entries registered during the current scheduling step are not matched until the next one.
Eviction is LRU over entries, touching only those a hit used, in two independent spaces: a
short pool evicts MLA pages (and the checkpoints that only those pages made reachable), a full
slab evicts checkpoints (intermediate before retained). With ``host_tier_bytes`` an evicted
checkpoint is written back to host memory together with its MLA pages (same lifetime) and a
later hit prefetches it.

Exactness: a hit must compute what an uncached prefill computes, to the bit. So only prompt
tokens are cached (a generated token's state came from the decode kernels, which round
differently from the prefill an uncached follow-up would run), hash blocks are a multiple of
the KDA chunk so prefill resumes on the chunk grid (the scheduler checks), and the model's
arithmetic is split-invariant (:mod:`services.model.kernels.stable`, absolute attention tiles).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from services.model.serving.checkpoint_slab import CheckpointSlab, SlabFull
from services.model.serving.pool import PagedPool, PagedState, PoolExhausted

__all__ = ["CacheStats", "HybridPrefixCache"]


def chain_hashes(token_ids: Sequence[int], block: int, count: int, prev: list[int]) -> list[int]:
    """Extend ``prev`` (hashes of the first blocks) to ``count`` chained block hashes."""
    out = list(prev)
    h = out[-1] if out else 0
    for i in range(len(out), count):
        data = array("q", token_ids[i * block : (i + 1) * block]).tobytes()
        h = int.from_bytes(
            hashlib.blake2b(h.to_bytes(16, "little") + data, digest_size=16).digest(), "little"
        )
        out.append(h)
    return out


@dataclass
class CacheStats:
    """Counters for /metrics (all cumulative except the checkpoint gauges)."""

    lookups: int = 0
    hits: int = 0
    lookup_tokens: int = 0  # prompt tokens asked about
    hit_tokens: int = 0  # tokens restored instead of prefilled
    recomputed_tokens: int = 0  # matched by MLA but recomputed for want of a checkpoint
    checkpoints_taken: int = 0
    checkpoints_recycled: int = 0
    evicted_pages: int = 0
    evicted_checkpoints: int = 0
    host_writes: int = 0
    host_write_bytes: int = 0
    host_hits: int = 0
    host_read_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0


@dataclass
class _Endpoint:
    page: int
    end: int
    step: int


@dataclass
class _Checkpoint:
    key: int
    end: int
    slot: int  # in the cache's CheckpointSlab
    step: int
    retained: bool = False
    hashes: list[int] = field(default_factory=list)  # chain hashes up to ``end`` (host tier)


@dataclass
class _HostEntry:
    end: int
    hashes: list[int]
    kda: torch.Tensor  # [slot_bytes]
    mla: torch.Tensor  # [pages, page_bytes]

    @property
    def nbytes(self) -> int:
        return self.kda.numel() + self.mla.numel()


@dataclass
class _Track:
    """What the cache knows about one live request."""

    hashes: list[int] = field(default_factory=list)
    registered: int = 0  # hash blocks whose endpoints are registered (or already were)
    last_block: int = 0  # hash block count at the last checkpoint taken or restored
    own: _Checkpoint | None = None  # its latest intermediate checkpoint (recycled when superseded)
    retain_at: set[int] = field(default_factory=set)


class HybridPrefixCache:
    """Implements :class:`~services.model.serving.prefix_cache.PrefixCache` over a PagedPool."""

    def __init__(
        self,
        pool: PagedPool,
        *,
        hash_block: int = 512,
        turn_end_ids: Iterable[int] = (),
        host_tier_bytes: int = 0,
        slab_bytes: int = 0,
    ) -> None:
        if hash_block <= 0 or pool.page_tokens % hash_block:
            raise ValueError(
                f"page_tokens ({pool.page_tokens}) must be a multiple of hash_block ({hash_block})"
            )
        self.pool = pool
        self.slab = CheckpointSlab.for_pool(pool, hash_block, slab_bytes)
        self.block = hash_block
        self.checkpoint_interval = hash_block
        self.turn_end_ids = frozenset(turn_end_ids)
        self.host_tier_bytes = host_tier_bytes
        self.stats = CacheStats()
        self.step = 0
        self._endpoints: dict[int, _Endpoint] = {}
        self._page_keys: dict[int, list[int]] = {}  # page -> endpoint hashes (cache holds 1 ref)
        self._ckpts: dict[int, _Checkpoint] = {}
        self._lru: OrderedDict[tuple[str, int], None] = OrderedDict()  # ("page"|"ckpt", id)
        self._host: OrderedDict[int, _HostEntry] = OrderedDict()
        self._live: dict[int, _Track] = {}
        pool.reclaim = self.evict
        self.slab.reclaim = self.evict_checkpoints

    # ----- gauges --------------------------------------------------------------------------
    @property
    def num_checkpoints(self) -> int:
        return len(self._ckpts)

    @property
    def checkpoint_bytes(self) -> int:
        return len(self._ckpts) * self.slab.slot_bytes

    @property
    def host_bytes(self) -> int:
        return sum(e.nbytes for e in self._host.values())

    def begin_step(self) -> None:
        """A scheduling step starts: entries registered before it become matchable."""
        self.step += 1

    # ----- lookup --------------------------------------------------------------------------
    def _visible(self, entry: _Endpoint | _Checkpoint | None) -> bool:
        return entry is not None and entry.step < self.step

    def lookup(self, token_ids: Sequence[int]) -> tuple[int, int, list[int], _Checkpoint | None]:
        """Two-stage lookup: ``(hit tokens, MLA-matched tokens, pages, checkpoint)``; no side effects."""
        b, per_page = self.block, self.pool.page_tokens // self.block
        hashes = chain_hashes(token_ids, b, (len(token_ids) - 1) // b, [])
        pages: list[int] = []
        matched = 0
        k = 0
        while k * per_page < len(hashes):  # MLA stage, page by page
            first, last = k * per_page, min((k + 1) * per_page, len(hashes))
            found = None
            for i in range(last - 1, first - 1, -1):  # the page-end hash first, then inside
                e = self._endpoints.get(hashes[i])
                if self._visible(e):
                    found = (i, e)
                    break
            if found is None:
                break
            i, e = found
            pages.append(e.page)
            matched = (i + 1) * b
            if i != (k + 1) * per_page - 1:
                break  # a partially matched page ends the walk
            k += 1
        for blocks in range(matched // b, 0, -1):  # KDA stage: deepest boundary with a state
            ck = self._ckpts.get(hashes[blocks - 1])
            if self._visible(ck):
                hit = blocks * b
                return hit, matched, pages[: -(-hit // self.pool.page_tokens)], ck
        return 0, matched, [], None

    def match(self, token_ids: Sequence[int], state: PagedState) -> int:
        """Restore the longest reusable prefix into the fresh ``state``; returns its length."""
        self._live[id(state)] = _Track()  # a fresh state: forget any earlier one at this id
        self.stats.lookups += 1
        self.stats.lookup_tokens += len(token_ids)
        hit, matched, pages, ck = self.lookup(token_ids)
        host = self._host_lookup(token_ids, hit)
        if host is not None:
            hit, pages, ck = host
            matched = max(matched, hit)
        elif self._host:  # a prefetch that did not fit may have evicted the device hit
            hit, matched, pages, ck = self.lookup(token_ids)
        self.stats.recomputed_tokens += max(0, matched - hit)
        if ck is None:
            return 0
        # Pin every hit page before anything else can allocate or evict; nothing allocates
        # between here and the copy out of the slot.
        for p in pages:
            self.pool.ref(p)
        self.slab.restore(ck.slot, state.kda_slot)
        state.block_table = list(pages)  # the pins become the request's references
        state.num_tokens = hit
        for p in pages:  # refresh only what this hit used
            self._touch(("page", p))
        self._touch(("ckpt", ck.key))
        tr = self._track(state)
        tr.hashes = chain_hashes(token_ids, self.block, hit // self.block, [])
        tr.registered = tr.last_block = hit // self.block
        self.stats.hits += 1
        self.stats.hit_tokens += hit
        return hit

    # ----- insertion -----------------------------------------------------------------------
    def _track(self, state: PagedState) -> _Track:
        return self._live.setdefault(id(state), _Track())

    def chunk_stop(self, token_ids: Sequence[int], start: int, end: int) -> int:
        """Where a prefill chunk over ``[start, end)`` should stop so turn checkpoints exist."""
        for pos in sorted(self._retain_positions(token_ids)):
            if start < pos < end:
                return pos
        return end

    def _retain_positions(self, token_ids: Sequence[int]) -> set[int]:
        b = self.block
        return {
            (i + 1) // b * b
            for i, t in enumerate(token_ids)
            if t in self.turn_end_ids and (i + 1) >= b
        }

    def on_prefill_chunk(self, token_ids: Sequence[int], state: PagedState) -> None:
        """After a forward: register completed hash blocks; checkpoint a hash-aligned end."""
        n, b = state.num_tokens, self.block
        if state.prefill_end is not None and n > state.prefill_end:
            return  # generated tokens: decode-kernel state, unlike an uncached prefill of them
        tr = self._track(state)
        if n // b > tr.registered:
            tr.hashes = chain_hashes(token_ids, b, n // b, tr.hashes)
            for i in range(tr.registered, n // b):
                h = tr.hashes[i]
                if h not in self._endpoints:
                    page = state.block_table[i * b // self.pool.page_tokens]
                    self._endpoints[h] = _Endpoint(page, (i + 1) * b, self.step)
                    if page not in self._page_keys:
                        self.pool.ref(page)
                        self._page_keys[page] = []
                    self._page_keys[page].append(h)
                    self._touch(("page", page))
            tr.registered = n // b
        if n % b or n // b <= tr.last_block:
            return
        tr.retain_at |= self._retain_positions(token_ids)
        for pos in tr.retain_at:  # a turn end seen only now retains the state before it
            kept = self._ckpts.get(tr.hashes[pos // b - 1]) if pos <= n else None
            if kept is not None:
                kept.retained = True
        key = tr.hashes[n // b - 1]
        retained = n in tr.retain_at
        tr.last_block = n // b
        if key in self._ckpts:  # someone already holds this state
            self._ckpts[key].retained |= retained
            return
        own = tr.own
        if own is not None and not own.retained and self._ckpts.get(own.key) is own:
            self._drop_checkpoint(own)  # superseded intermediate: recycle its slot first
            self.stats.checkpoints_recycled += 1
        tr.own = None
        try:
            slot = self.slab.take()
        except SlabFull:
            return  # no room for a snapshot now; the request still progresses
        self.slab.save(state.kda_slot, slot)
        ck = _Checkpoint(key, n, slot, self.step, retained, list(tr.hashes[: n // b]))
        self._ckpts[key] = ck
        self._touch(("ckpt", key))
        self.stats.checkpoints_taken += 1
        tr.own = None if retained else ck

    def on_finished(self, token_ids: Sequence[int], state: PagedState) -> None:
        """The request ends (or is preempted); its latest checkpoint stays for follow-ups."""
        self._live.pop(id(state), None)

    # ----- eviction ------------------------------------------------------------------------
    def _touch(self, node: tuple[str, int]) -> None:
        self._lru[node] = None
        self._lru.move_to_end(node)

    def evict(self, num_pages: int) -> int:
        """Free at least ``num_pages`` pool pages held only by the cache, LRU first; returns freed.

        Pages a running request (or a hit being restored) references are never candidates.
        Checkpoints hold no pages, so only MLA pages go (with the checkpoints they made
        reachable, see :meth:`_drop_page`).
        """
        freed = 0
        for kind, ident in list(self._lru):
            if freed >= num_pages:
                break
            if kind == "page" and self.pool.refs[ident] == 1:
                self._drop_page(ident)
                freed += 1
                self.stats.evicted_pages += 1
        return freed

    def evict_checkpoints(self, num_slots: int) -> int:
        """Free at least ``num_slots`` slab slots, LRU first, intermediate before retained."""
        freed = 0
        for want_retained in (False, True):
            for kind, ident in list(self._lru):
                if freed >= num_slots:
                    return freed
                if kind != "ckpt" or self._ckpts[ident].retained != want_retained:
                    continue
                self._evict_checkpoint(self._ckpts[ident])
                freed += 1
        return freed

    def _evict_checkpoint(self, ck: _Checkpoint) -> None:
        self._write_back(ck)
        self._drop_checkpoint(ck)
        self.stats.evicted_checkpoints += 1

    def _drop_checkpoint(self, ck: _Checkpoint) -> None:
        del self._ckpts[ck.key]
        self._lru.pop(("ckpt", ck.key), None)
        self.slab.free(ck.slot)

    def _anchors(self, hashes: list[int]) -> list[int]:
        """The endpoint hashes whose pages hold the prefix ``hashes`` chain (one per page)."""
        per_page, n = self.pool.page_tokens // self.block, len(hashes)
        return [hashes[min((k + 1) * per_page, n) - 1] for k in range(-(-n // per_page))]

    def _drop_page(self, page: int) -> None:
        """Evict an MLA page. A checkpoint whose prefix resolves through it can no longer be
        matched (short of a deeper endpoint of the same tokens), so it goes too, written back
        first while its MLA prefix is still on the device: slots follow their pages."""
        keys = set(self._page_keys[page])
        for ck in [c for c in self._ckpts.values() if keys.intersection(self._anchors(c.hashes))]:
            self._evict_checkpoint(ck)
        for h in self._page_keys.pop(page):
            del self._endpoints[h]
        self._lru.pop(("page", page), None)
        self.pool.unref(page)

    # ----- host tier -----------------------------------------------------------------------
    def _write_back(self, ck: _Checkpoint) -> None:
        """Copy an evicted checkpoint and the MLA pages up to it to host memory (if enabled)."""
        if not self.host_tier_bytes or ck.key in self._host:
            return
        pages = self._pages_for(ck.hashes)
        if pages is None:
            return  # its MLA prefix is already gone: nothing reusable to keep
        st = self.pool.storage
        entry = _HostEntry(
            ck.end,
            list(ck.hashes),
            self.slab.storage[ck.slot].to("cpu", copy=True),
            st[pages].to("cpu", copy=True) if pages else st[:0].cpu(),
        )
        self._host[ck.key] = entry
        self.stats.host_writes += 1
        self.stats.host_write_bytes += entry.nbytes
        while self.host_bytes > self.host_tier_bytes and self._host:
            self._host.popitem(last=False)

    def _pages_for(self, hashes: list[int]) -> list[int] | None:
        """The device pages holding the prefix that ``hashes`` chain, or None if any is gone."""
        ends = [self._endpoints.get(h) for h in self._anchors(hashes)]
        return None if None in ends else [e.page for e in ends]

    def _host_lookup(
        self, token_ids: Sequence[int], device_hit: int
    ) -> tuple[int, list[int], _Checkpoint] | None:
        """Prefetch the deepest host entry longer than the device hit back into the pool."""
        if not self._host:
            return None
        b = self.block
        hashes = chain_hashes(token_ids, b, (len(token_ids) - 1) // b, [])
        for blocks in range(len(hashes), device_hit // b, -1):
            key = hashes[blocks - 1]
            entry = self._host.pop(key, None)  # out first: evictions below write back
            if entry is None:
                continue
            if key in self._ckpts:  # the same state on the device, not yet matchable
                self._drop_checkpoint(self._ckpts[key])
            try:
                slot = self.slab.take()
            except SlabFull:
                self._host[key] = entry
                return None
            try:
                mla = self.pool.take(entry.mla.shape[0])
            except PoolExhausted:
                self.slab.free(slot)
                self._host[key] = entry
                return None
            self.slab.storage[slot] = entry.kda.to(self.slab.storage.device)
            if mla:
                st = self.pool.storage
                st[mla] = entry.mla.to(st.device)
            self.stats.host_hits += 1
            self.stats.host_read_bytes += entry.nbytes
            ck = _Checkpoint(key, entry.end, slot, -1, False, entry.hashes)
            self._ckpts[ck.key] = ck
            self._touch(("ckpt", ck.key))
            per_page = self.pool.page_tokens // b
            for k, page in enumerate(mla):  # register its endpoints (its copy is already done)
                self._page_keys[page] = []
                self.pool.filled[page] = min(self.pool.page_tokens, entry.end - k * b * per_page)
                for i in range(k * per_page, min((k + 1) * per_page, len(entry.hashes))):
                    h = entry.hashes[i]
                    if h not in self._endpoints:
                        self._endpoints[h] = _Endpoint(page, (i + 1) * b, -1)
                        self._page_keys[page].append(h)
                self._touch(("page", page))
            return entry.end, mla, ck
        return None

    def check_invariants(self) -> None:
        """Every cache reference is accounted for (for tests)."""
        self.pool.check_invariants()
        for page, keys in self._page_keys.items():
            assert self.pool.refs[page] >= 1, f"cached page {page} is free"
            assert all(self._endpoints[h].page == page for h in keys)
        self.slab.check_invariants([ck.slot for ck in self._ckpts.values()])
        assert set(self._ckpts) == {i for kind, i in self._lru if kind == "ckpt"}
