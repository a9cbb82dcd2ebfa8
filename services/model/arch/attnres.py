"""Block Attention Residuals (report §2.2).

Each sublayer (attention, FFN) and the output head read their input as a softmax mix of
*sources* instead of a running residual sum:

    h = sum_i softmax_i( w^T RMSNorm(v_i) ) v_i

with a learned pseudo-query ``w`` (``*_res_proj.weight [1, d]``) and a key RMSNorm
(``*_res_norm.weight [d]``) per sublayer. Sources are the embedding (block 0), one sum
per completed block of ``attn_res_block_size`` layers, and the partial sum of the
current block (attention and FFN outputs of its layers so far). The reference that keeps
every layer's output separately (full AttnRes) is
:func:`services.model.arch.naive.naive_full_attn_res_forward`.
"""

from __future__ import annotations

import torch
from torch import nn

from .norm import RMSNorm, rms_norm

__all__ = ["attn_res_mix", "apply_attn_res", "make_attn_res"]


def attn_res_mix(
    sources: list[torch.Tensor], query: torch.Tensor, key_norm: torch.Tensor, eps: float
) -> torch.Tensor:
    """Mix ``sources`` (each ``[..., d]``) with pseudo-query ``query [d]``; returns ``[..., d]``."""
    if len(sources) == 1:
        return sources[0]
    v = torch.stack(sources)  # [S, ..., d]
    # a product and a row sum, not a GEMV: BLAS's GEMV rounds rows differently by row count
    logits = (rms_norm(v, key_norm, eps).float() * query.float()).sum(-1)  # [S, ...]
    # softmax along a contiguous last dim: along dim 0 it vectorises across tokens, and a
    # token in the vector tail would round differently from the same token mid-vector
    a = logits.movedim(0, -1).contiguous().softmax(-1).movedim(-1, 0).to(v.dtype)
    return (a.unsqueeze(-1) * v).sum(0)


def make_attn_res(hidden: int, eps: float) -> tuple[RMSNorm, nn.Linear]:
    """The per-sublayer parameters: key RMSNorm and pseudo-query (zero init = uniform mix)."""
    proj = nn.Linear(hidden, 1, bias=False)
    nn.init.zeros_(proj.weight)
    return RMSNorm(hidden, eps), proj


def apply_attn_res(sources: list[torch.Tensor], norm: RMSNorm, proj: nn.Linear) -> torch.Tensor:
    return attn_res_mix(sources, proj.weight[0], norm.weight, norm.eps)
