"""The scheduler's seam for the hybrid prefix cache (its own issue); no cache lives here.

The engine takes ``prefix_cache: PrefixCache | None``. With ``None`` every request prefills from
token 0 and reports ``cached_tokens = 0``; nothing pretends to cache. A real cache implements
this Protocol and is passed in; the scheduler already calls it at the three points below.

Design note (for the implementer; after the report's §5.4.1 and SGLang's ``MambaRadixCache``):

* K3 state is hybrid. MLA layers keep a latent KV per token in pageable blocks, so any prefix
  that is a whole number of blocks can be shared by reference (``StatePools.fork`` already
  shares blocks and copies the tail on write). KDA layers keep one fixed-size recurrent state per
  request that summarises *all* tokens so far; it cannot be cut back to a shorter prefix. So a
  reusable prefix needs a KDA checkpoint taken exactly at its end.
* ``match`` therefore returns the longest prefix for which the tree has both the MLA blocks and a
  KDA checkpoint: walk the radix tree over token ids by whole blocks, then back off to the
  deepest node holding a KDA state (a node without one is a tombstone). On a hit it copies the
  checkpoint into the request's fresh slot (``StatePools.copy_slot``), points the request's
  block table at the shared blocks (taking references), sets ``state.num_tokens``, and returns
  that count; the scheduler then prefills only the rest. A full hit must still leave at least
  one token to compute, because the last token's logits are needed to sample.
* ``on_prefill_chunk`` is called after every computed chunk; it is where checkpoints are taken.
  Because a KDA state exists only at chunk ends, where checkpoints can land is set by how the
  scheduler cuts chunks: ``checkpoint_interval`` (tokens, or ``None``) asks the scheduler to
  end chunks on multiples of it (vLLM's "align" mode), so long prompts leave periodic
  checkpoints and a shared system prompt of any length leaves one at its end.
* ``on_finished`` hands the final state over for insertion (the whole conversation, so a
  follow-up turn hits) before the engine frees the request. The tree takes its own slot for the
  checkpoint (copy) and references on the blocks; it never owns the pool's tensors, and evicts
  KDA checkpoints (tombstoning inner nodes) before MLA blocks, LRU by node, touching only the
  node actually used on a hit.
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
