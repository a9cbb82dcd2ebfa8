"""Right-sized slots for the prefix cache's KDA checkpoints, apart from the paged pool.

A checkpoint is one request's KDA state, every layer back to back, in the same layout as a
running request's state slot (:attr:`PagedPool.state_raw`), so taking or restoring one is a
single row copy and never costs a pool page. The slab is one ``uint8`` tensor on the pool's
device with its own free list; when it is full, ``reclaim(n)`` (the cache's checkpoint eviction)
is asked for room before :class:`SlabFull` is raised.

Its default size follows the model config and the pool (:meth:`CheckpointSlab.reach`): a
checkpoint is found only at a hash-block endpoint registered in a pool page, so the cache can
never reach more checkpoints than the pool holds hash blocks; more slots would stay empty
(the old fixed 32 MiB was used to 0.78 MiB by the bench's trace).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from services.model.arch.state import PoolExhausted
from services.model.serving.pool import PagedPool

__all__ = ["CheckpointSlab", "SlabFull"]


class SlabFull(PoolExhausted):
    """No free slot and nothing the cache could evict."""


class CheckpointSlab:
    """``num_slots`` slots of :attr:`slot_bytes`; a slot id is an index into :attr:`storage`."""

    def __init__(self, pool: PagedPool, num_slots: int) -> None:
        if num_slots <= 0:
            raise ValueError("num_slots must be > 0")
        self.pool = pool
        self.slot_bytes = max(pool.state_bytes, 1)
        self.num_slots = num_slots
        self.storage = torch.zeros(
            num_slots, self.slot_bytes, dtype=torch.uint8, device=pool.device
        )
        self._free: list[int] = list(range(num_slots - 1, -1, -1))
        #: Called with a slot count when none is free; returns how many it freed.
        self.reclaim: Callable[[int], int] | None = None

    @staticmethod
    def reach(pool: PagedPool, hash_block: int) -> int:
        """The most checkpoints the cache can reach: one per hash block the pool's pages hold."""
        return pool.num_pages * max(pool.page_tokens // hash_block, 1)

    @classmethod
    def for_pool(cls, pool: PagedPool, hash_block: int, nbytes: int = 0) -> CheckpointSlab:
        """``nbytes`` of slots (at least one), or with ``nbytes=0`` :meth:`reach` slots."""
        if nbytes:
            return cls(pool, max(1, nbytes // max(pool.state_bytes, 1)))
        return cls(pool, cls.reach(pool, hash_block))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_slots - len(self._free)

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

    def save(self, state_slot: int, slot: int) -> None:
        """Copy a request's KDA state (its pool state slot) into checkpoint ``slot``."""
        self.storage[slot].copy_(self.pool.state_raw[state_slot, : self.slot_bytes])

    def restore(self, slot: int, state_slot: int) -> None:
        """Copy checkpoint ``slot`` into a request's state slot (the inverse of :meth:`save`)."""
        self.pool.state_raw[state_slot, : self.slot_bytes].copy_(self.storage[slot])

    def check_invariants(self, held: Sequence[int]) -> None:
        """``held`` (the cache's slots) and the free list partition the slab."""
        assert len(set(held)) == len(held), "a slot held twice"
        assert not set(held) & set(self._free), "a held slot is on the free list"
        assert len(held) + len(self._free) == self.num_slots, "a slot leaked"
