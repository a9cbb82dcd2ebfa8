"""Right-sized slots for the prefix cache's KDA checkpoints, apart from the paged pool.

A pool page is sized for a page of MLA latent KV (1.1 MiB on ``tiny-micro`` at 6144 tokens), but
one request's KDA state is far smaller (31 KiB there): a checkpoint that took a page per KDA group
wasted most of it and crowded MLA pages out of the pool. A slot holds exactly one request's KDA
state, every group back to back (per group, the bytes the group's layers use in its page), so a
checkpoint costs one slot and never a pool page. The slab is one ``uint8`` tensor on the pool's
device with its own free list; when it is full, ``reclaim(n)`` (the cache's checkpoint eviction)
is asked for room before :class:`SlabFull` is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from services.model.arch.state import PoolExhausted
from services.model.serving.pool import PagedPool

__all__ = ["DEFAULT_SLAB_BYTES", "CheckpointSlab", "SlabFull"]

#: The slab's default size (``K3STACK_MODEL__CHECKPOINT_SLAB_BYTES``).
DEFAULT_SLAB_BYTES = 32 << 20


class SlabFull(PoolExhausted):
    """No free slot and nothing the cache could evict."""


class CheckpointSlab:
    """``num_slots`` slots of :attr:`slot_bytes`; a slot id is an index into :attr:`storage`."""

    def __init__(self, pool: PagedPool, num_slots: int) -> None:
        if num_slots <= 0:
            raise ValueError("num_slots must be > 0")
        self.pool = pool
        layers = [
            min(pool.layers_per_group, pool.n_kda - g * pool.layers_per_group)
            for g in range(pool.num_groups)
        ]
        self.group_bytes = [n * pool.layer_bytes for n in layers]
        self.slot_bytes = max(sum(self.group_bytes), 1)
        self.num_slots = num_slots
        self.storage = torch.zeros(
            num_slots, self.slot_bytes, dtype=torch.uint8, device=pool.device
        )
        self._free: list[int] = list(range(num_slots - 1, -1, -1))
        #: Called with a slot count when none is free; returns how many it freed.
        self.reclaim: Callable[[int], int] | None = None

    @classmethod
    def for_bytes(cls, pool: PagedPool, nbytes: int) -> CheckpointSlab:
        """As many slots as fit in ``nbytes``, and at least one."""
        probe = cls(pool, 1)
        return cls(pool, max(1, nbytes // probe.slot_bytes))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def nbytes(self) -> int:
        return self.storage.numel()

    def take(self) -> int:
        """A free slot, asking the cache to evict a checkpoint if there is none."""
        if not self._free and self.reclaim is not None:
            self.reclaim(1)
        if not self._free:
            raise SlabFull(f"all {self.num_slots} checkpoint slots are held")
        return self._free.pop()

    def free(self, slot: int) -> None:
        assert slot not in self._free, f"slot {slot} freed twice"
        self._free.append(slot)

    def save(self, kda_pages: Sequence[int], slot: int) -> None:
        """Copy a request's KDA state (its private pages, one per group) into ``slot``."""
        off = 0
        for page, n in zip(kda_pages, self.group_bytes, strict=True):
            self.storage[slot, off : off + n].copy_(self.pool.storage[page, :n])
            off += n

    def restore(self, slot: int, kda_pages: Sequence[int]) -> None:
        """Copy ``slot`` into a request's private KDA pages (the inverse of :meth:`save`)."""
        off = 0
        for page, n in zip(kda_pages, self.group_bytes, strict=True):
            self.pool.storage[page, :n].copy_(self.storage[slot, off : off + n])
            off += n

    def check_invariants(self, held: Sequence[int]) -> None:
        """``held`` (the cache's slots) and the free list partition the slab."""
        assert len(set(held)) == len(held), "a slot held twice"
        assert not set(held) & set(self._free), "a held slot is on the free list"
        assert len(held) + len(self._free) == self.num_slots, "a slot leaked"
