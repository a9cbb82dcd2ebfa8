"""Fused routed-expert MoE on CPU: MXFP4 weights dequantised on the fly, vectorised torch.

All paths share one signature (STYLE §3):

    fused_moe_mxfp4(x, topk_ids, topk_weights, w13_packed, w13_scale, w2_packed, w2_scale,
                    *, beta1, beta2) -> y

- ``x [T, L]`` routed-path input (the latent ``W_down x``), any float dtype;
- ``topk_ids [T, k]`` int64 expert ids, ``topk_weights [T, k]`` mixture weights;
- ``w13_packed [E, 2I, L/2]`` / ``w13_scale [E, 2I, L/32]``: gate (w1, rows ``:I``) and up
  (w3, rows ``I:``) in compressed-tensors MXFP4; ``w2_packed [E, L, I/2]`` /
  ``w2_scale [E, L, I/32]``: down (w2);
- returns ``y [T, L]`` fp32 = ``sum_j w_j * E_j(x)`` with SiTU-GLU experts.

Tokens are grouped by expert (one sort), and each active expert's weights are
dequantised once per call and applied to all of its tokens with one GEMM, so the dense
copy of an expert exists only transiently. :func:`fused_moe_dense` is the same for
unquantised ``w13 [E, 2I, L]``, ``w2 [E, L, I]``. The reference is
:func:`services.model.kernels.naive.naive_fused_moe_mxfp4`; the GPU version is
:func:`services.model.kernels.triton_moe.triton_fused_moe_mxfp4`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..quant.mxfp4 import dequantize_mxfp4
from .activation import situ_glu
from .stable import stable_matmul

__all__ = ["fused_moe_mxfp4", "fused_moe_dense", "sort_by_expert"]


def sort_by_expert(
    topk_ids: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group the (token, slot) pairs by expert.

    Returns ``(order [T*k], token_of_pair [T*k], counts [E])``: ``order`` sorts the
    flattened pairs by expert id (stable), ``token_of_pair[order]`` gives each sorted pair's
    token, and ``counts`` the pairs per expert.
    """
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    k = topk_ids.shape[-1]
    token_of_pair = torch.arange(flat.numel(), device=flat.device) // k
    counts = torch.bincount(flat, minlength=num_experts)
    return order, token_of_pair, counts


def _grouped(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    num_experts: int,
    expert_weights: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    beta1: float,
    beta2: float,
) -> torch.Tensor:
    t, lw = x.shape
    out = torch.zeros(t, lw, dtype=torch.float32, device=x.device)
    if t == 0:
        return out
    order, token_of_pair, counts = sort_by_expert(topk_ids, num_experts)
    tokens = token_of_pair[order]
    weights = topk_weights.reshape(-1)[order].float()
    xs = x.float()[tokens]  # [T*k, L] gathered once, expert-major
    active = torch.nonzero(counts).flatten()
    w13_all, w2_all = expert_weights(active)  # [A, 2I, L], [A, L, I] fp32, active experts only
    start = 0
    for a, n in enumerate(counts[active].tolist()):
        w13, w2 = w13_all[a], w2_all[a]
        h = stable_matmul(xs[start : start + n], w13.t())
        gate, up = h.chunk(2, dim=-1)
        y = stable_matmul(situ_glu(gate, up, beta1, beta2), w2.t())
        out.index_add_(0, tokens[start : start + n], y * weights[start : start + n, None])
        start += n
    return out


def fused_moe_mxfp4(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w13_packed: torch.Tensor,
    w13_scale: torch.Tensor,
    w2_packed: torch.Tensor,
    w2_scale: torch.Tensor,
    *,
    beta1: float = 4.0,
    beta2: float = 25.0,
) -> torch.Tensor:
    """Routed experts with MXFP4 weights; see the module docstring for shapes."""

    def weights(e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return dequantize_mxfp4(w13_packed[e], w13_scale[e]), dequantize_mxfp4(
            w2_packed[e], w2_scale[e]
        )

    return _grouped(x, topk_ids, topk_weights, w13_packed.shape[0], weights, beta1, beta2)


def fused_moe_dense(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    *,
    beta1: float = 4.0,
    beta2: float = 25.0,
) -> torch.Tensor:
    """Routed experts with unquantised weights ``w13 [E, 2I, L]``, ``w2 [E, L, I]``."""

    def weights(e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return w13[e].float(), w2[e].float()

    return _grouped(x, topk_ids, topk_weights, w13.shape[0], weights, beta1, beta2)
