"""K3ForCausalLM: the K3 hybrid decoder (KDA + gated MLA, Block AttnRes, Stable LatentMoE).

Interface used by the serving engine (``services/model/serving``):

- :meth:`K3ForCausalLM.forward_ragged` runs one engine step over several requests with
  different lengths (prefill chunks and one-token decodes mixed) against their
  :class:`~services.model.arch.state.RequestState` in :class:`StatePools`;
- :meth:`K3ForCausalLM.forward` is the stateless full-sequence forward (test reference).
"""

from __future__ import annotations

import torch
from torch import nn

from .config import K3Config
from .state import RequestState, StatePools

__all__ = ["K3ForCausalLM"]


class K3ForCausalLM(nn.Module):
    """The K3 language model at any size given by :class:`K3Config`."""

    def __init__(self, config: K3Config) -> None:
        super().__init__()
        self.config = config

    def forward_ragged(
        self,
        token_ids: list[torch.LongTensor],
        states: list[RequestState],
        pools: StatePools,
    ) -> list[torch.Tensor]:
        """One step for several requests; appends to each state.

        Args:
            token_ids: per request, the new tokens ``[T_i]`` (a prefill chunk or one
                decode token); ``T_i >= 1``.
            states: per request, its state from ``pools`` (``num_tokens`` = tokens already
                processed); advanced by ``T_i`` on return.
            pools: the pools holding the states.

        Returns:
            per request, logits ``[T_i, vocab_size]`` (fp32).

        Raises:
            PoolExhausted: not enough MLA blocks for the new tokens; no state changed.
        """
        raise NotImplementedError

    def forward(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """Stateless causal forward: ``input_ids [B, T]`` -> logits ``[B, T, V]``."""
        raise NotImplementedError
