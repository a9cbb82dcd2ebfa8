"""Fused MXFP4 routed-expert MoE in Triton (W4A16/W4A32: weights dequantised in registers).

Same signature and result as :func:`services.model.kernels.moe.fused_moe_mxfp4`. Hopper
has no FP4 tensor-core MMA, so the kernels unpack E2M1 nibbles and E8M0 scales to floats
tile by tile right before ``tl.dot`` (the weight stays 4.25 bits/param in memory, which
is what decode's bandwidth pays for).

Layout (vLLM-style ``moe_align``): the (token, slot) pairs are sorted by expert and each
expert's run is padded to ``BLOCK_M`` rows, so every M-tile belongs to one expert.

1. ``_w13_situ_kernel``: ``act[p] = SiTU(x[tok(p)] @ W1_e^T, x[tok(p)] @ W3_e^T)``;
   gate and up tiles are accumulated side by side and the activation is fused.
2. ``_w2_kernel``: ``y[p] = w_p * act[p] @ W2_e^T``, written per pair; the ``k`` pairs of a
   token are summed afterwards.

Runs on CUDA, and on the CPU under ``TRITON_INTERPRET=1`` (slow; used by the tests).

Precision: the fp32 dots run in IEEE fp32 by default. Triton's own default for fp32 ``tl.dot`` is
TF32 on tensor cores (10-bit mantissa), which would silently break the 1e-5 agreement with the
torch path the tests demand; ``precision="tf32"`` opts into it for speed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .moe import sort_by_expert

__all__ = ["triton_fused_moe_mxfp4", "align_pairs"]

BLOCK_M = 16
BLOCK_N = 32
BLOCK_K = 32  # = the MXFP4 group: one scale per row per K step


@triton.jit
def _e2m1_to_float(code):
    """4-bit code (int32) -> float32: sign bit 3, magnitude index 0..7."""
    mag = code & 7
    e = mag >> 1
    m = (mag & 1).to(tl.float32)
    val = tl.where(e == 0, m * 0.5, (1.0 + 0.5 * m) * tl.exp2((e - 1).to(tl.float32)))
    return tl.where((code & 8) != 0, -val, val)


@triton.jit
def _load_w_tile(w_ptr, s_ptr, e, rn, k0, N, K, stride_we, stride_wn, stride_se, stride_sn):
    """Dequantised ``W_e[rn, k0 : k0 + BLOCK_K]`` transposed -> ``[BLOCK_K, BLOCK_N]``."""
    HALF: tl.constexpr = BLOCK_K // 2
    rb = tl.arange(0, HALF)
    nmask = rn < N
    bytes_ = tl.load(
        w_ptr + e * stride_we + rn[:, None] * stride_wn + (k0 // 2 + rb)[None, :],
        mask=nmask[:, None],
        other=0,
    ).to(tl.int32)  # [BLOCK_N, BLOCK_K / 2]
    lo = _e2m1_to_float(bytes_ & 15)
    hi = _e2m1_to_float(bytes_ >> 4)
    vals = tl.reshape(tl.join(lo, hi), (BLOCK_N, BLOCK_K))  # even col = low nibble
    sc = tl.load(s_ptr + e * stride_se + rn * stride_sn + k0 // 32, mask=nmask, other=127)
    scale = tl.exp2(sc.to(tl.float32) - 127.0)
    return tl.trans(vals * scale[:, None])


@triton.jit
def _w13_situ_kernel(
    x_ptr, w_ptr, s_ptr, pair_ptr, bexp_ptr, act_ptr,
    num_pairs, top_k, width, inter,
    stride_xt, stride_we, stride_wn, stride_se, stride_sn, stride_ap,
    beta1, beta2,
    PRECISION: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(pair_ptr + rm)
    valid = pair < num_pairs
    tok = pair // top_k
    e = tl.load(bexp_ptr + pid_m)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, width, BLOCK_K):
        a = tl.load(
            x_ptr + tok[:, None] * stride_xt + (k0 + rk)[None, :], mask=valid[:, None], other=0.0
        )
        wg = _load_w_tile(
            w_ptr, s_ptr, e, rn, k0, inter, width, stride_we, stride_wn, stride_se, stride_sn
        )
        wu = _load_w_tile(
            w_ptr,
            s_ptr,
            e,
            rn + inter,
            k0,
            2 * inter,
            width,
            stride_we,
            stride_wn,
            stride_se,
            stride_sn,
        )
        acc_g += tl.dot(a.to(tl.float32), wg, input_precision=PRECISION)
        acc_u += tl.dot(a.to(tl.float32), wu, input_precision=PRECISION)
    # SiTU-GLU: [b1 tanh(g/b1) sigmoid(g)] [b2 tanh(u/b2)], tanh(z) = 2 sigmoid(2z) - 1.
    sig_g = 1.0 / (1.0 + tl.exp(-acc_g))
    t_g = 2.0 / (1.0 + tl.exp(-2.0 * acc_g / beta1)) - 1.0
    t_u = 2.0 / (1.0 + tl.exp(-2.0 * acc_u / beta2)) - 1.0
    act = (beta1 * t_g * sig_g) * (beta2 * t_u)
    tl.store(
        act_ptr + rm[:, None] * stride_ap + rn[None, :],
        act,
        mask=valid[:, None] & (rn < inter)[None, :],
    )


@triton.jit
def _w2_kernel(
    act_ptr, w_ptr, s_ptr, pair_ptr, bexp_ptr, wt_ptr, y_ptr,
    num_pairs, width, inter,
    stride_ap, stride_we, stride_wn, stride_se, stride_sn, stride_yp,
    PRECISION: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(pair_ptr + rm)
    valid = pair < num_pairs
    e = tl.load(bexp_ptr + pid_m)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, inter, BLOCK_K):
        a = tl.load(
            act_ptr + rm[:, None] * stride_ap + (k0 + rk)[None, :], mask=valid[:, None], other=0.0
        )
        w = _load_w_tile(
            w_ptr, s_ptr, e, rn, k0, width, inter, stride_we, stride_wn, stride_se, stride_sn
        )
        acc += tl.dot(a, w, input_precision=PRECISION)
    wt = tl.load(wt_ptr + pair, mask=valid, other=0.0)
    tl.store(
        y_ptr + pair[:, None] * stride_yp + rn[None, :],
        acc * wt[:, None],
        mask=valid[:, None] & (rn < width)[None, :],
    )


def align_pairs(
    topk_ids: torch.Tensor, num_experts: int, block_m: int = BLOCK_M
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs sorted by expert, each expert's run padded to ``block_m``.

    Returns ``(sorted_pairs [P_pad] int32, block_expert [P_pad / block_m] int32)``; padding
    rows hold the sentinel ``T * k`` (masked out by the kernels).
    """
    order, _, counts = sort_by_expert(topk_ids, num_experts)
    sentinel = topk_ids.numel()
    runs, experts = [], []
    start = 0
    for e, n in enumerate(counts.tolist()):
        if n == 0:
            continue
        padded = -(-n // block_m) * block_m
        run = torch.full((padded,), sentinel, dtype=torch.int64, device=topk_ids.device)
        run[:n] = order[start : start + n]
        runs.append(run)
        experts += [e] * (padded // block_m)
        start += n
    return (
        torch.cat(runs).to(torch.int32),
        torch.tensor(experts, dtype=torch.int32, device=topk_ids.device),
    )


def triton_fused_moe_mxfp4(
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
    precision: str = "ieee",
) -> torch.Tensor:
    """Triton twin of :func:`~services.model.kernels.moe.fused_moe_mxfp4` (same contract);
    ``precision``: ``"ieee"`` fp32 dots, or ``"tf32"`` (faster, ~1e-3 relative error)."""
    if precision not in ("ieee", "tf32"):
        raise ValueError(f"precision must be 'ieee' or 'tf32', not {precision!r}")
    t, lw = x.shape
    k = topk_ids.shape[1]
    e_num, two_i, _ = w13_packed.shape
    im = two_i // 2
    if lw % BLOCK_K or im % BLOCK_K:
        raise ValueError(f"widths must be multiples of {BLOCK_K}: L={lw}, I={im}")
    if t == 0:
        return torch.zeros(0, lw, dtype=torch.float32, device=x.device)
    x = x.float().contiguous()
    pairs, bexp = align_pairs(topk_ids, e_num)
    num_pairs = t * k
    n_blocks = bexp.numel()
    act = torch.empty(pairs.numel(), im, dtype=torch.float32, device=x.device)
    w13_packed, w13_scale = w13_packed.contiguous(), w13_scale.contiguous()
    w2_packed, w2_scale = w2_packed.contiguous(), w2_scale.contiguous()
    _w13_situ_kernel[(n_blocks, triton.cdiv(im, BLOCK_N))](
        x, w13_packed, w13_scale, pairs, bexp, act,
        num_pairs, k, lw, im,
        x.stride(0), w13_packed.stride(0), w13_packed.stride(1),
        w13_scale.stride(0), w13_scale.stride(1), act.stride(0),
        float(beta1), float(beta2),
        PRECISION=precision,
    )  # fmt: skip
    y_pairs = torch.zeros(num_pairs, lw, dtype=torch.float32, device=x.device)
    wts = topk_weights.float().reshape(-1).contiguous()
    _w2_kernel[(n_blocks, triton.cdiv(lw, BLOCK_N))](
        act, w2_packed, w2_scale, pairs, bexp, wts, y_pairs,
        num_pairs, lw, im,
        act.stride(0), w2_packed.stride(0), w2_packed.stride(1),
        w2_scale.stride(0), w2_scale.stride(1), y_pairs.stride(0),
        PRECISION=precision,
    )  # fmt: skip
    return y_pairs.view(t, k, lw).sum(1)
