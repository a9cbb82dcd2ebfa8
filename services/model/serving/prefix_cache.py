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
