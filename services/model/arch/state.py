"""Per-request model state in preallocated pools (SGLang style: pools only allocate).

Two kinds of state, both sized once from the config:

- KDA: one *slot* per request holding, for every KDA layer, the recurrent state
  ``S [H, K, V]`` (fp32, as fla requires) and the short-conv windows (the last
  ``kernel - 1`` inputs of the q, k, v convolutions). A slot's size does not grow with
  the sequence, so a slot is all a request needs.
- MLA: the latent KV (normalised ``c_kv`` plus the unrotated ``k_pe``) of every token,
  in fixed-size token *blocks*; a request owns a block table. Blocks are reference
  counted so that :meth:`StatePools.fork` shares full blocks and copies on write.

The pools never evict: :meth:`StatePools.allocate` and :meth:`StatePools.reserve` raise
:class:`PoolExhausted` and the caller (the scheduler, later the prefix cache) decides.
The prefix cache keeps slot ids and block ids and copies states with :meth:`fork` /
:meth:`copy_slot`; it never owns tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import K3Config

__all__ = ["PoolExhausted", "RequestState", "StatePools"]


class PoolExhausted(RuntimeError):
    """No free KDA slot or MLA block; nothing was changed by the failing call."""


@dataclass
class RequestState:
    """Where one request's state lives. Owned by the engine, memory owned by the pools.

    Attributes:
        slot: row of the KDA state / conv pools.
        block_table: MLA block ids in token order; token ``t`` sits in
            ``block_table[t // block_size]`` at offset ``t % block_size``.
        num_tokens: tokens already processed (the KDA state and the latent cache cover
            exactly these).
        prefill_end: the prompt length when the scheduler knows it: tokens before it run the
            prefill kernels, tokens from it on the decode kernels, whatever the chunk length
            (None: a one-token chunk is a decode).
    """

    slot: int
    block_table: list[int] = field(default_factory=list)
    num_tokens: int = 0
    freed: bool = False
    prefill_end: int | None = None


class StatePools:
    """Preallocated KDA slots and MLA latent blocks for up to ``max_requests`` requests.

    Args:
        config: model config (layer kinds, KDA heads, MLA latent width).
        max_requests: number of KDA slots.
        max_tokens: latent-cache capacity in tokens over all requests (rounded up to
            whole blocks).
        device, dtype: where and in which dtype the conv windows and latent cache live;
            the KDA recurrent state is always fp32.
        block_size: tokens per MLA block.
    """

    def __init__(
        self,
        config: K3Config,
        max_requests: int,
        max_tokens: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        *,
        block_size: int = 16,
    ) -> None:
        if max_requests <= 0 or max_tokens <= 0 or block_size <= 0:
            raise ValueError("max_requests, max_tokens and block_size must be > 0")
        self.config = config
        self.block_size = block_size
        self.device = torch.device(device)
        self.dtype = dtype
        la = config.linear_attn_config
        n_kda, n_mla = len(config.kda_layer_ids), len(config.mla_layer_ids)
        self.num_slots = max_requests
        self.num_blocks = -(-max_tokens // block_size)
        # [slots, kda_layers, H, K, V] fp32: the delta-rule state.
        self.kda_state = torch.zeros(
            max_requests, n_kda, la.num_heads, la.head_dim, la.head_dim,
            device=self.device, dtype=torch.float32,
        )  # fmt: skip
        # [slots, kda_layers, kernel - 1, 3 * H * K]: last inputs of the q | k | v convs.
        self.conv_state = torch.zeros(
            max_requests, n_kda, max(la.short_conv_kernel_size - 1, 0), 3 * config.kda_dim,
            device=self.device, dtype=dtype,
        )  # fmt: skip
        # [blocks, mla_layers, block_size, kv_lora_rank + rope_dim]: the latent KV cache.
        self.mla_kv = torch.zeros(
            self.num_blocks, n_mla, block_size, config.mla_latent_dim,
            device=self.device, dtype=dtype,
        )  # fmt: skip
        self._free_slots: list[int] = list(range(max_requests - 1, -1, -1))
        self._free_blocks: list[int] = list(range(self.num_blocks - 1, -1, -1))
        self._block_refs = [0] * self.num_blocks

    # ----- accounting ----------------------------------------------------------------------
    @property
    def num_free_slots(self) -> int:
        return len(self._free_slots)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_blocks)

    def blocks_needed(self, state: RequestState, num_new_tokens: int) -> int:
        """Blocks :meth:`reserve` would take for ``num_new_tokens`` more tokens."""
        need = -(-(state.num_tokens + num_new_tokens) // self.block_size)
        extra = max(0, need - len(state.block_table))
        if num_new_tokens > 0 and state.num_tokens % self.block_size and state.block_table:
            last = state.block_table[(state.num_tokens - 1) // self.block_size]
            extra += int(self._block_refs[last] > 1)  # copy-on-write of a shared tail
        return extra

    # ----- lifecycle -----------------------------------------------------------------------
    def allocate(self) -> RequestState:
        """A fresh request state (zeroed KDA slot, no blocks). Raises PoolExhausted."""
        if not self._free_slots:
            raise PoolExhausted(f"all {self.num_slots} KDA state slots are in use")
        slot = self._free_slots.pop()
        self.kda_state[slot].zero_()
        self.conv_state[slot].zero_()
        return RequestState(slot=slot)

    def free(self, state: RequestState) -> None:
        """Return the slot and drop one reference to each block. Idempotent per state."""
        if state.freed:
            return
        self._free_slots.append(state.slot)
        for b in state.block_table:
            self._unref(b)
        state.block_table = []
        state.freed = True

    def fork(self, state: RequestState) -> RequestState:
        """A copy of ``state`` in a new slot: KDA state copied, MLA blocks shared.

        The shared tail block is copied on the next write (:meth:`reserve`), so the two
        requests diverge independently. Raises PoolExhausted with nothing changed.
        """
        child = self.allocate()
        self.copy_slot(state.slot, child.slot)
        for b in state.block_table:
            self._block_refs[b] += 1
        child.block_table = list(state.block_table)
        child.num_tokens = state.num_tokens
        return child

    def copy_slot(self, src: int, dst: int) -> None:
        """Copy the KDA recurrent state and conv windows of slot ``src`` into ``dst``."""
        self.kda_state[dst].copy_(self.kda_state[src])
        self.conv_state[dst].copy_(self.conv_state[src])

    def reserve(self, state: RequestState, num_new_tokens: int) -> list[int]:
        """Make room for ``num_new_tokens`` more tokens; returns the newly taken blocks.

        Copies a shared (forked) tail block before it is written. All or nothing: raises
        PoolExhausted without taking any block.
        """
        need = self.blocks_needed(state, num_new_tokens)
        if need > len(self._free_blocks):
            raise PoolExhausted(
                f"need {need} MLA blocks of {self.block_size} tokens, "
                f"{len(self._free_blocks)} free of {self.num_blocks}"
            )
        taken: list[int] = []
        if num_new_tokens > 0 and state.num_tokens % self.block_size and state.block_table:
            i = (state.num_tokens - 1) // self.block_size
            last = state.block_table[i]
            if self._block_refs[last] > 1:
                new = self._take_block()
                self.mla_kv[new].copy_(self.mla_kv[last])
                self._unref(last)
                state.block_table[i] = new
                taken.append(new)
        total = -(-(state.num_tokens + num_new_tokens) // self.block_size)
        while len(state.block_table) < total:
            b = self._take_block()
            state.block_table.append(b)
            taken.append(b)
        return taken

    def release(self, state: RequestState, blocks: list[int]) -> None:
        """Undo a :meth:`reserve` that took ``blocks`` but whose step did not run.

        Only blocks appended at the end are handed back; a copy-on-write replacement stays
        (it holds the same data as the block it replaced).
        """
        for b in reversed(blocks):
            if state.block_table and state.block_table[-1] == b:
                state.block_table.pop()
                self._unref(b)

    # ----- latent cache access (used by the model) -----------------------------------------
    def _token_index(self, state: RequestState, start: int, stop: int) -> tuple[Tensor, Tensor]:
        pos = torch.arange(start, stop, device=self.device)
        table = torch.tensor(state.block_table, device=self.device, dtype=torch.long)
        return table[pos // self.block_size], pos % self.block_size

    def write_latent(self, state: RequestState, mla_idx: int, start: int, latent: Tensor) -> None:
        """Store ``latent [T, D]`` for tokens ``start .. start+T`` of MLA layer ``mla_idx``."""
        blk, off = self._token_index(state, start, start + latent.shape[0])
        self.mla_kv[blk, mla_idx, off] = latent.to(self.dtype)

    def read_latent(self, state: RequestState, mla_idx: int, stop: int) -> Tensor:
        """The latent KV ``[stop, D]`` of tokens ``0 .. stop`` of MLA layer ``mla_idx``."""
        nb = -(-stop // self.block_size)
        table = torch.tensor(state.block_table[:nb], device=self.device, dtype=torch.long)
        return self.mla_kv[table, mla_idx].reshape(nb * self.block_size, -1)[:stop]

    # ----- the model's pool interface (shared with the serving layer's paged pool) ---------
    def kda_read(self, states: list[RequestState], row: int) -> tuple[Tensor, Tensor]:
        """KDA layer ``row``'s ``(conv windows, recurrent states)`` of ``states`` (copies)."""
        slots = torch.tensor([s.slot for s in states], dtype=torch.long, device=self.device)
        return self.conv_state[slots, row], self.kda_state[slots, row]

    def kda_write(self, states: list[RequestState], row: int, conv: Tensor, s: Tensor) -> None:
        slots = torch.tensor([st.slot for st in states], dtype=torch.long, device=self.device)
        self.conv_state[slots, row] = conv.to(self.dtype)
        self.kda_state[slots, row] = s

    def latent_pages(self, state: RequestState, mla_idx: int, stop: int) -> list[Tensor]:
        """Tokens ``0 .. stop`` of layer ``mla_idx`` as one page (these blocks are tiny)."""
        return [self.read_latent(state, mla_idx, stop)]

    # ----- internals -----------------------------------------------------------------------
    def _take_block(self) -> int:
        b = self._free_blocks.pop()
        self._block_refs[b] = 1
        return b

    def _unref(self, b: int) -> None:
        self._block_refs[b] -= 1
        assert self._block_refs[b] >= 0, f"block {b} freed twice"
        if self._block_refs[b] == 0:
            self._free_blocks.append(b)

    def check_invariants(self) -> None:
        """Free lists and reference counts agree (for tests)."""
        free = set(self._free_blocks)
        assert len(free) == len(self._free_blocks), "duplicate free block"
        for b, r in enumerate(self._block_refs):
            assert (r == 0) == (b in free), f"block {b}: refs={r}, free={b in free}"
        assert len(set(self._free_slots)) == len(self._free_slots), "duplicate free slot"


Tensor = torch.Tensor
