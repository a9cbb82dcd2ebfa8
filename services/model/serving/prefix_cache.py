"""The scheduler's seam for the hybrid prefix cache (its own issue); no cache lives here.

The engine takes ``prefix_cache: PrefixCache | None``. With ``None`` every request prefills from
token 0 and reports ``cached_tokens = 0``; nothing pretends to cache. A real cache implements
this Protocol and is passed in; the scheduler already calls it at the three points below.

The implementation is :class:`services.model.serving.hybrid_cache.HybridPrefixCache`
(report §5.4.1: one paged pool, 512-token chained hash blocks inside large pages, sparse KDA
checkpoints at hash endpoints, two-stage lookup).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class PrefixCache(Protocol):
    """What the scheduler asks of a prefix cache; see the module docstring for the design."""

    #: Tokens between KDA checkpoints the scheduler should align prefill chunks to, or None.
    checkpoint_interval: int | None

    def match(self, token_ids: Sequence[int], state: Any) -> int:
        """Restore the longest cached prefix of ``token_ids`` into the fresh ``state``.

        Returns the number of tokens now covered (``state.num_tokens``), at most
        ``len(token_ids) - 1``; 0 on a miss, leaving ``state`` untouched.
        """
        ...

    def on_prefill_chunk(self, token_ids: Sequence[int], state: Any) -> None:
        """``state`` now covers ``token_ids[: state.num_tokens]``; checkpoint if useful."""
        ...

    def on_finished(self, token_ids: Sequence[int], state: Any) -> None:
        """The request is done; insert what is worth keeping before its state is freed."""
        ...


#: The prefix-cache readings on /health and /metrics (``k3stack_model_engine_<key>``).
PREFIX_CACHE_METRICS = {
    "prefix_cache_hit_tokens": "Prompt tokens restored from the prefix cache since start.",
    "prefix_cache_lookup_tokens": "Prompt tokens looked up in the prefix cache since start.",
    "prefix_cache_hit_rate": "Hit tokens over looked-up tokens since start.",
    "prefix_cache_recomputed_tokens": "Tokens with cached KV recomputed for want of a KDA state.",
    "prefix_cache_checkpoints": "KDA checkpoints held.",
    "prefix_cache_checkpoint_bytes": "Bytes of checkpoint-slab slots the KDA checkpoints hold.",
    "prefix_cache_checkpoint_slots": "Slots of the checkpoint slab (sized from the model config).",
    "prefix_cache_evicted_pages": "MLA pages evicted since start.",
    "prefix_cache_evicted_checkpoints": "KDA checkpoints evicted since start.",
    "prefix_cache_host_write_bytes": "Bytes written back to the host tier since start.",
    "prefix_cache_host_read_bytes": "Bytes prefetched from the host tier since start.",
}


def prefix_cache_metrics(cache: object | None) -> dict[str, float]:
    """The readings above for ``cache`` (zeros without a cache, or one without stats)."""
    stats = getattr(cache, "stats", None)
    if stats is None:
        return dict.fromkeys(PREFIX_CACHE_METRICS, 0.0)
    return {
        "prefix_cache_hit_tokens": stats.hit_tokens,
        "prefix_cache_lookup_tokens": stats.lookup_tokens,
        "prefix_cache_hit_rate": stats.hit_rate,
        "prefix_cache_recomputed_tokens": stats.recomputed_tokens,
        "prefix_cache_checkpoints": getattr(cache, "num_checkpoints", 0),
        "prefix_cache_checkpoint_bytes": getattr(cache, "checkpoint_bytes", 0),
        "prefix_cache_checkpoint_slots": getattr(getattr(cache, "slab", None), "num_slots", 0),
        "prefix_cache_evicted_pages": stats.evicted_pages,
        "prefix_cache_evicted_checkpoints": stats.evicted_checkpoints,
        "prefix_cache_host_write_bytes": stats.host_write_bytes,
        "prefix_cache_host_read_bytes": stats.host_read_bytes,
    }
