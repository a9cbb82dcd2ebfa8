"""Reference MoE paths: dequantise everything, loop over tokens, fp32 (STYLE §3).

Same signatures as :mod:`services.model.kernels.moe`; slow on purpose and obviously right.
"""

from __future__ import annotations

import torch

from ..quant.mxfp4 import dequantize_mxfp4
from .activation import situ_glu

__all__ = ["naive_fused_moe_mxfp4", "naive_fused_moe_dense"]


def naive_fused_moe_dense(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    *,
    beta1: float = 4.0,
    beta2: float = 25.0,
) -> torch.Tensor:
    t, lw = x.shape
    out = torch.zeros(t, lw, dtype=torch.float32)
    for i in range(t):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[i, j])
            gate, up = (w13[e].float() @ x[i].float()).chunk(2)
            out[i] += float(topk_weights[i, j]) * (w2[e].float() @ situ_glu(gate, up, beta1, beta2))
    return out


def naive_fused_moe_mxfp4(
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
    w13 = dequantize_mxfp4(w13_packed, w13_scale)
    w2 = dequantize_mxfp4(w2_packed, w2_scale)
    return naive_fused_moe_dense(x, topk_ids, topk_weights, w13, w2, beta1=beta1, beta2=beta2)
