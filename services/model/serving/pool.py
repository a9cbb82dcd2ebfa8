"""The paged pool of MLA latent-KV pages, and the per-request KDA state slots beside it.

- An **MLA page** holds ``page_tokens`` tokens of latent KV for every MLA layer
  (``[mla_layers, page_tokens, kv_lora_rank + rope]`` in the model dtype), cut from one ``uint8``
  tensor with one free list and one reference count.
- A **state slot** holds one running request's KDA recurrent state, every KDA layer back to back;
  per layer, each head's bytes are contiguous: ``[H, K*V + (W-1)*3*K]`` fp32, the delta-rule state
  ``S_h`` followed by that head's q|k|v short-conv window. Slots are sized from the model config
  (:attr:`PagedPool.state_bytes`, 122 KiB on ``tiny``) and there is one per request the engine
  runs, so pages are left to KV: a request's state used to take a whole page (3.75 MiB there),
  16 of the default pool's 22 pages. The prefix cache's checkpoints use the same slot layout
  (:mod:`.checkpoint_slab`), so saving or restoring one is a single row copy.

``state_in_pages=True`` reproduces the old layout (each request's state in a private pool page)
for the bench's before/after figures. A request's MLA page may be shared with the prefix cache
and other requests: only its *writer* (the request that filled it) appends, and only at its fill
mark; anyone else copies the page before writing (copy on write), so bytes others can see are
never changed in place. When pages run out the pool asks ``reclaim(n)`` (the prefix cache's
eviction) before raising :class:`PoolExhausted`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from services.model.arch.config import K3Config
from services.model.arch.state import PoolExhausted

__all__ = ["PagedPool", "PagedState", "PoolExhausted"]


@dataclass(eq=False)
class PagedState:
    """One request's KDA state slot and its MLA page table."""

    kda_slot: int
    block_table: list[int] = field(default_factory=list)
    num_tokens: int = 0
    freed: bool = False
    prefill_end: int | None = None  # as in RequestState

    @property
    def slot(self) -> int:
        """A unique id while the state lives, for duplicate checks."""
        return self.kda_slot


class PagedPool:
    """``num_pages`` MLA pages of ``page_bytes`` and ``max_requests`` state slots; see above."""

    def __init__(
        self,
        config: K3Config,
        num_pages: int,
        *,
        max_requests: int = 16,
        page_tokens: int = 6144,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        state_in_pages: bool = False,
    ) -> None:
        if num_pages <= 0 or page_tokens <= 0 or max_requests <= 0:
            raise ValueError("num_pages, page_tokens and max_requests must be > 0")
        la = config.linear_attn_config
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        self.page_tokens = page_tokens
        self.num_pages = num_pages
        self.max_requests = max_requests
        self.state_in_pages = state_in_pages
        self.n_mla, self.latent_dim = len(config.mla_layer_ids), config.mla_latent_dim
        self.n_kda = len(config.kda_layer_ids)
        self.heads, self.head_dim = la.num_heads, la.head_dim
        self.conv_width = max(la.short_conv_kernel_size - 1, 0)
        self.head_elems = self.head_dim * self.head_dim + self.conv_width * 3 * self.head_dim
        elt = torch.empty((), dtype=dtype).element_size()
        self.mla_bytes = self.n_mla * page_tokens * self.latent_dim * elt
        self.layer_bytes = self.heads * self.head_elems * 4
        #: One request's KDA state (every layer), the size of a state slot.
        self.state_bytes = self.n_kda * self.layer_bytes
        page = max(self.mla_bytes, self.state_bytes if state_in_pages else 0, 16)
        self.page_bytes = -(-page // 16) * 16
        self.storage = torch.zeros(num_pages, self.page_bytes, dtype=torch.uint8, device=device)
        # Typed views of the same bytes (no copies).
        self.mla_view = (
            self.storage[:, : self.mla_bytes]
            .view(dtype)
            .view(num_pages, self.n_mla, page_tokens, self.latent_dim)
        )
        if state_in_pages:
            self.state_raw = self.storage[:, : self.state_bytes]
            self._free_slots: list[int] = []  # a state takes a page
        else:
            self.state_raw = torch.zeros(
                max_requests, self.state_bytes, dtype=torch.uint8, device=device
            )
            self._free_slots = list(range(max_requests - 1, -1, -1))
        #: ``[slots, n_kda, H, head_elems]`` fp32 over :attr:`state_raw` (a slot per row).
        self.state_view = self.state_raw.view(torch.float32).view(
            self.state_raw.shape[0], self.n_kda, self.heads, self.head_elems
        )
        self._live = 0
        self._free: list[int] = list(range(num_pages - 1, -1, -1))
        self.refs = [0] * num_pages
        self.filled = [0] * num_pages  # MLA tokens written into the page
        self._writer: list[int | None] = [None] * num_pages  # id() of the state that may append
        #: Called with a page count when short; returns how many pages it freed.
        self.reclaim: Callable[[int], int] | None = None

    @classmethod
    def for_tokens(
        cls,
        config: K3Config,
        *,
        max_tokens: int,
        max_requests: int,
        page_tokens: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        spare_pages: int = 0,
        state_in_pages: bool = False,
    ) -> PagedPool:
        """A pool for ``max_tokens`` of latent KV and ``max_requests`` state slots (with
        ``state_in_pages``, a page per request more, as the old layout sized it)."""
        pages = -(-max_tokens // page_tokens) + (max_requests if state_in_pages else 0)
        return cls(
            config, pages + spare_pages, max_requests=max_requests, page_tokens=page_tokens,
            device=device, dtype=dtype, state_in_pages=state_in_pages,
        )  # fmt: skip

    # ----- accounting ----------------------------------------------------------------------
    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def num_free_slots(self) -> int:
        """Requests that may still start (pages are checked, and reclaimed, at allocation)."""
        return self.max_requests - self._live

    @property
    def num_live(self) -> int:
        """State slots in use: one per running request."""
        return self._live

    @property
    def num_used_pages(self) -> int:
        """Pages referenced by requests or the prefix cache (and, in the old layout, states)."""
        return self.num_pages - len(self._free)

    @property
    def max_tokens(self) -> int:
        """The longest request the pool can always hold: every page, since states live in
        slots and others' pages are preempted or evicted for it (in the old layout, the pages
        left once every request has its state page)."""
        reserved = self.max_requests if self.state_in_pages else 0
        return max(self.num_pages - reserved, 1) * self.page_tokens

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_pages

    def take(self, n: int) -> list[int]:
        """``n`` fresh pages (refcount 1), reclaiming from the cache if short; all or nothing."""
        if n > len(self._free) and self.reclaim is not None:
            self.reclaim(n - len(self._free))
        if n > len(self._free):
            raise PoolExhausted(f"need {n} pages, {len(self._free)} free of {self.num_pages}")
        pages = [self._free.pop() for _ in range(n)]
        for p in pages:
            self.refs[p], self.filled[p], self._writer[p] = 1, 0, None
        return pages

    def ref(self, page: int) -> None:
        assert self.refs[page] > 0, f"page {page} is free"
        self.refs[page] += 1

    def unref(self, page: int) -> None:
        self.refs[page] -= 1
        assert self.refs[page] >= 0, f"page {page} freed twice"
        if self.refs[page] == 0:
            self._writer[page] = None
            self._free.append(page)

    def copy_page(self, src: int, dst: int) -> None:
        self.storage[dst].copy_(self.storage[src])

    # ----- request lifecycle (the runner's pool interface) ---------------------------------
    def allocate(self) -> PagedState:
        """A fresh state: a zeroed KDA state slot, no MLA pages. Raises PoolExhausted."""
        if self._live >= self.max_requests:
            raise PoolExhausted(f"all {self.max_requests} request slots are in use")
        slot = self.take(1)[0] if self.state_in_pages else self._free_slots.pop()
        self.state_raw[slot].zero_()
        self._live += 1
        return PagedState(kda_slot=slot)

    def free(self, state: PagedState) -> None:
        if state.freed:
            return
        for p in state.block_table:
            if self._writer[p] == id(state):
                self._writer[p] = None
            self.unref(p)
        if self.state_in_pages:
            self.unref(state.kda_slot)
        else:
            self._free_slots.append(state.kda_slot)
        state.block_table, state.freed = [], True
        self._live -= 1

    def _needs_copy(self, state: PagedState) -> bool:
        off = state.num_tokens % self.page_tokens
        if not off or not state.block_table:
            return False
        tail = state.block_table[state.num_tokens // self.page_tokens]
        return self._writer[tail] != id(state) or self.filled[tail] != off

    def pages_needed(self, state: PagedState, num_new_tokens: int) -> int:
        total = -(-(state.num_tokens + num_new_tokens) // self.page_tokens)
        extra = max(0, total - len(state.block_table))
        return extra + int(num_new_tokens > 0 and self._needs_copy(state))

    def reserve(self, state: PagedState, num_new_tokens: int) -> list[int]:
        """Room for ``num_new_tokens`` more tokens; copies a shared tail page first. Idempotent."""
        fresh = self.take(self.pages_needed(state, num_new_tokens))
        taken = list(fresh)
        if num_new_tokens > 0 and self._needs_copy(state):
            i = state.num_tokens // self.page_tokens
            new = fresh.pop()
            self.copy_page(state.block_table[i], new)
            self.unref(state.block_table[i])
            state.block_table[i] = new
            self.filled[new] = state.num_tokens % self.page_tokens
        for p in fresh:
            state.block_table.append(p)
        for p in taken:
            self._writer[p] = id(state)
        return taken

    def release(self, state: PagedState, taken: list[int]) -> None:
        """Undo a :meth:`reserve` whose step did not run (appended pages only)."""
        for p in reversed(taken):
            if state.block_table and state.block_table[-1] == p:
                state.block_table.pop()
                self.unref(p)

    # ----- what the model reads and writes -------------------------------------------------
    def _slots(self, states: Sequence[PagedState]) -> torch.Tensor:
        return torch.tensor([s.kda_slot for s in states], device=self.device)

    def kda_read(self, states: Sequence[PagedState], row: int) -> tuple[torch.Tensor, torch.Tensor]:
        """KDA layer ``row``'s ``(conv [B, W-1, 3*H*K], S [B, H, K, V])`` for ``states``."""
        flat = self.state_view[self._slots(states), row]  # [B, H, head_elems] (a gather: a copy)
        b, h, k, w = len(states), self.heads, self.head_dim, self.conv_width
        s = flat[..., : k * k].reshape(b, h, k, k)
        conv = flat[..., k * k :].reshape(b, h, w, 3, k).permute(0, 2, 3, 1, 4)
        return conv.reshape(b, w, 3 * h * k).to(self.dtype), s

    def kda_write(
        self, states: Sequence[PagedState], row: int, conv: torch.Tensor, s: torch.Tensor
    ) -> None:
        b, h, k, w = len(states), self.heads, self.head_dim, self.conv_width
        conv_h = conv.float().reshape(b, w, 3, h, k).permute(0, 3, 1, 2, 4).reshape(b, h, -1)
        flat = torch.cat((s.float().reshape(b, h, k * k), conv_h), dim=-1)
        self.state_view[self._slots(states), row] = flat

    def write_latent(
        self, state: PagedState, mla_idx: int, start: int, latent: torch.Tensor
    ) -> None:
        """Store ``latent [T, D]`` for tokens ``start .. start+T`` of MLA layer ``mla_idx``."""
        pos = torch.arange(start, start + latent.shape[0], device=self.device)
        table = torch.tensor(state.block_table, device=self.device, dtype=torch.long)
        page, off = table[pos // self.page_tokens], pos % self.page_tokens
        self.mla_view[page, mla_idx, off] = latent.to(self.dtype)
        if mla_idx == self.n_mla - 1:
            end = start + latent.shape[0]
            for i in range(start // self.page_tokens, -(-end // self.page_tokens)):
                p = state.block_table[i]
                self.filled[p] = max(
                    self.filled[p], min(end - i * self.page_tokens, self.page_tokens)
                )

    def latent_pages(self, state: PagedState, mla_idx: int, stop: int) -> list[torch.Tensor]:
        """Views ``[n_i, D]`` of the pages holding tokens ``0 .. stop`` of layer ``mla_idx``."""
        out = []
        for i, p in enumerate(state.block_table[: -(-stop // self.page_tokens)]):
            n = min(self.page_tokens, stop - i * self.page_tokens)
            out.append(self.mla_view[p, mla_idx, :n])
        return out

    def check_invariants(self) -> None:
        free = set(self._free)
        assert len(free) == len(self._free), "duplicate free page"
        for p, r in enumerate(self.refs):
            assert (r == 0) == (p in free), f"page {p}: refs={r}, free={p in free}"
        if not self.state_in_pages:
            assert len(set(self._free_slots)) == len(self._free_slots), "duplicate free slot"
            assert len(self._free_slots) + self._live == self.max_requests, "a slot leaked"
