"""The model runner: what the engine loop needs from a model, and the K3 implementation.

The engine only sees :class:`ModelRunner` (allocate/free state, reserve room, run one ragged
step), so the scheduler is independent of the architecture; :class:`K3Runner` binds it to
``K3ForCausalLM`` and its ``StatePools``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from services.model.arch.state import PoolExhausted, RequestState, StatePools

log = logging.getLogger("k3stack.model.runner")

__all__ = ["K3Runner", "ModelRunner", "PoolExhausted"]


class ModelRunner(Protocol):
    """One model plus the pools its per-request state lives in."""

    #: Logit columns the model produces.
    vocab_size: int
    #: Most tokens (prompt + output) one request can hold.
    max_model_len: int

    @property
    def num_free_slots(self) -> int: ...

    def allocate(self) -> Any:
        """A fresh per-request state; raises :class:`PoolExhausted`."""
        ...

    def free(self, state: Any) -> None: ...

    def reserve(self, state: Any, num_new_tokens: int) -> list[int]:
        """Room for ``num_new_tokens`` more tokens (all or nothing); raises PoolExhausted."""
        ...

    def release(self, state: Any, taken: list[int]) -> None:
        """Undo a :meth:`reserve` whose step will not run."""
        ...

    def forward(self, chunks: Sequence[Sequence[int]], states: Sequence[Any]) -> list[torch.Tensor]:
        """Run one step; returns each request's logits at its last new position ``[vocab]``."""
        ...


class K3Runner:
    """``K3ForCausalLM`` + ``StatePools`` behind :class:`ModelRunner`."""

    def __init__(self, model: Any, pools: Any, *, max_model_len: int | None = None) -> None:
        self.model = model
        self.pools = pools
        self.vocab_size = int(model.config.vocab_size)
        capacity = getattr(pools, "max_tokens", None) or pools.num_blocks * pools.block_size
        self.max_model_len = min(max_model_len or capacity, capacity)

    @classmethod
    def create(
        cls,
        *,
        preset: str = "tiny",
        checkpoint: Path | None = None,
        max_num_seqs: int = 16,
        max_pool_tokens: int = 16384,
        max_model_len: int | None = None,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        page_tokens: int = 0,
    ) -> K3Runner:
        """Build the model (checkpoint weights, or random weights from ``seed``) and pools."""
        from services.model.arch.config import K3Config
        from services.model.arch.model import K3ForCausalLM

        if checkpoint is not None:
            model = _load_checkpoint(Path(checkpoint), device=device, dtype=dtype)
            config = model.config
        else:
            config = K3Config.preset(preset)
            model = K3ForCausalLM(config).init_weights(seed)
        model = model.to(device=device).eval()
        pools: Any
        if page_tokens:  # the one paged pool the prefix cache works over
            from services.model.serving.pool import PagedPool

            pools = PagedPool.for_tokens(
                config, max_tokens=max_pool_tokens, max_requests=max_num_seqs,
                page_tokens=page_tokens, device=device, dtype=dtype,
            )  # fmt: skip
        else:
            pools = StatePools(config, max_num_seqs, max_pool_tokens, device=device, dtype=dtype)
        log.info(
            "model ready: preset=%s checkpoint=%s slots=%d pool=%s",
            preset, checkpoint, max_num_seqs, type(pools).__name__,
        )  # fmt: skip
        return cls(model, pools, max_model_len=max_model_len)

    @property
    def num_free_slots(self) -> int:
        return self.pools.num_free_slots

    @property
    def prefill_align(self) -> int:
        """Prefill chunks end on multiples of this (the KDA chunk grid) unless at the prompt end."""
        from services.model.arch.kda import prefill_chunk_size

        return prefill_chunk_size(self.pools.device)

    @property
    def cache_usage(self) -> float:
        """Fraction of the latent KV cache blocks (or pool pages) in use (0..1)."""
        if hasattr(self.pools, "usage"):
            return float(self.pools.usage)
        return 1.0 - self.pools.num_free_blocks / self.pools.num_blocks

    @property
    def memory_readings(self) -> dict[str, float]:
        """Pool pages (MLA KV) and KDA state slots, in all and in use, for /metrics."""
        p = self.pools
        if hasattr(p, "num_used_pages"):
            pages, used = p.num_pages, p.num_used_pages
        else:
            pages, used = p.num_blocks, p.num_blocks - p.num_free_blocks
        slots = getattr(p, "max_requests", None) or p.num_slots
        return {
            "pool_pages": pages,
            "pool_pages_used": used,
            "state_slots": slots,
            "state_slots_used": slots - p.num_free_slots,
        }

    def allocate(self) -> RequestState:
        return self.pools.allocate()

    def free(self, state: RequestState) -> None:
        self.pools.free(state)

    def reserve(self, state: RequestState, num_new_tokens: int) -> list[int]:
        return self.pools.reserve(state, num_new_tokens)

    def release(self, state: RequestState, taken: list[int]) -> None:
        self.pools.release(state, taken)

    @torch.inference_mode()
    def forward(
        self, chunks: Sequence[Sequence[int]], states: Sequence[RequestState]
    ) -> list[torch.Tensor]:
        device = self.pools.device
        ids = [torch.tensor(list(c), dtype=torch.long, device=device) for c in chunks]
        logits = self.model.forward_ragged(ids, list(states), self.pools, last_only=True)
        return [lg[-1] for lg in logits]


def _load_checkpoint(path: Path, *, device: str, dtype: torch.dtype) -> Any:
    """Load a K3 safetensors checkpoint (config.json + shards) with the arch package's loader."""
    from services.model.checkpoint import load_checkpoint

    return load_checkpoint(path, device=device, dtype=dtype)
