"""Kimi Delta Attention (report §2.1.1): ops and the layer.

Per head, with channel-wise decay ``alpha_t = exp(g_t)``:

    S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T (scale q_t)

Two paths with the same signature (fla's ``chunk_kda`` / ``fused_recurrent_kda`` layout:
q, k ``[B, T, H, K]``, v ``[B, T, H, V]``, g ``[B, T, H, K]`` log decay, beta ``[B, T, H]``,
state ``[B, H, K, V]`` fp32):

- :func:`chunk_kda` (prefill): inside a chunk of C tokens the delta rule is solved in
  closed form (WY / UT transform), across chunks the state is carried. With ``G`` the
  in-chunk cumulative log decay and ``delta_r = beta_r (v_r - (exp(G_r) k_r)^T S_r-1...)``,
  ``(I + A) delta = beta (V - (exp(G) * K) S_0)`` with the strictly lower
  ``A_rs = beta_r k_r^T diag(exp(G_r - G_s)) k_s``; then
  ``O = (exp(G) * Q) S_0 + tril(Q diag(exp(G_r - G_s)) K^T) delta`` and
  ``S_C = exp(G_C) S_0 + (exp(G_C - G) * K)^T delta``. Decays ``exp(G_r - G_s)`` are split
  at the chunk's midpoint (never ``1 / Gamma`` from the chunk start), which keeps each factor
  in fp32 range under K3's gate bound; a chunk spanning more decay falls back to pairwise
  differences, so any ``g`` is safe. A chunk's arithmetic does not depend on the other chunks
  of the call, so prefill split on the chunk grid equals unsplit prefill bit for bit.
- :func:`recurrent_kda` (decode): the token loop, batched over requests.

The reference token loop is :func:`services.model.arch.naive.naive_recurrent_kda`.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels.stable import StableLinear, stable_sigmoid
from .config import K3Config
from .norm import RMSNorm, rms_norm

__all__ = [
    "CHUNK_SIZE",
    "kda_kernels",
    "prefill_chunk_size",
    "chunk_kda",
    "recurrent_kda",
    "kda_lowerbound_gate",
    "short_conv",
    "KimiDeltaAttention",
]


log = logging.getLogger("k3stack.model.kda")

#: Tokens per chunk of :func:`chunk_kda`; fla's Triton kernel uses 64.
CHUNK_SIZE = 32


def prefill_chunk_size(device: torch.device) -> int:
    """The chunk grid of the prefill kernel :func:`kda_kernels` picks on ``device``.

    Chunks are counted from the start of each forward, so a prefill split only at multiples of
    this computes exactly what one unsplit prefill computes (the prefix cache relies on it).
    """
    return 64 if _fla_kernels(device) is not None else CHUNK_SIZE


#: Fallback reasons already logged (a warning per distinct reason, not one per forward).
_FALLBACKS_LOGGED: set[str] = set()


def _fla_kernels(device: torch.device):
    """fla's ``(chunk_kda, fused_recurrent_kda)`` on CUDA when ``fla-core`` imports, else None.

    On CUDA a failed import (fla or triton missing or broken) falls back to this module's
    torch code, an order of magnitude slower: that is logged as a warning naming the error.
    """
    if device.type != "cuda":
        return None
    try:
        from fla.ops.kda import chunk_kda as fla_chunk
        from fla.ops.kda import fused_recurrent_kda as fla_recurrent
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        if reason not in _FALLBACKS_LOGGED:
            _FALLBACKS_LOGGED.add(reason)
            log.warning(
                "KDA on %s falls back to the torch kernels: fla's CUDA kernels did not import "
                "(%s); install fla-core and triton for the fast path",
                device, reason,
            )  # fmt: skip
        return None
    return fla_chunk, fla_recurrent


def kda_kernels(device: torch.device, mode: str):
    """The KDA op for ``mode`` ("chunk" or "recurrent") on ``device``.

    On CUDA, fla's ``chunk_kda`` / ``fused_recurrent_kda`` when ``fla-core`` imports (same
    argument layout; the gate, l2-norm and beta are computed before the call, so none of
    fla's in-kernel options are used); everywhere else this module's torch code.
    """
    fla = _fla_kernels(device)
    if fla is not None:
        return fla[0] if mode == "chunk" else fla[1]
    return chunk_kda if mode == "chunk" else recurrent_kda


def kda_lowerbound_gate(
    z: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor | None, lower_bound: float
) -> torch.Tensor:
    """``g = g_min * sigmoid(exp(A_log) * (z + dt_bias))``; z ``[..., H, K]`` -> g fp32.

    The bound keeps every per-step log decay in ``(g_min, 0)`` (report eq. 5).
    """
    h = z.shape[-2]
    z = z.float()
    if dt_bias is not None:
        z = z + dt_bias.float().view(h, -1)
    return lower_bound * torch.sigmoid(A_log.float().view(h, 1).exp() * z)


def recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token-by-token KDA (decode path). Shapes as in the module docstring.

    Returns ``(o [B, T, H, V], S [B, H, K, V] fp32 or None)``.
    """
    dtype = v.dtype
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    scale = dk**-0.5 if scale is None else scale
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    s = q.new_zeros(b, h, dk, dv) if initial_state is None else initial_state.float().clone()
    decay = g.exp()
    out = q.new_empty(b, t, h, dv)
    for i in range(t):
        ki = k[:, i]  # [B, H, K]
        s = s * decay[:, i, :, :, None]
        pred = torch.einsum("bhk,bhkv->bhv", ki, s)
        delta = beta[:, i, :, None] * (v[:, i] - pred)  # [B, H, V]
        s = s + ki[..., None] * delta[:, :, None, :]
        out[:, i] = torch.einsum("bhk,bhkv->bhv", q[:, i] * scale, s)
    return out.to(dtype), (s if output_final_state else None)


#: Largest |log decay| a factor of the midpoint factorisation may carry (exp(85) < fp32 max).
_MAX_HALF_SPAN = 85.0


def _chunk_scores(
    q: torch.Tensor, k: torch.Tensor, gc: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``kk_rs = k_r^T D(r,s) k_s`` and ``qk_rs = q_r^T D(r,s) k_s`` (lower parts valid).

    ``D(r,s) = diag(exp(G_r - G_s))`` factorises through the chunk's midpoint ``m`` as
    ``exp(G_r - G_m) exp(G_m - G_s)``, so both are two matmuls per chunk instead of a
    ``[C, C, K]`` pairwise tensor. Each factor stays inside fp32 while ``|G_r - G_m| <= 85``,
    which K3's gate bound guarantees (``C / 2 * |g_min| = 16 * 5``); chunks whose decay spans
    more take the pairwise form. The choice is per chunk, so a chunk's numbers never depend on
    which other chunks share the call. Entries above the diagonal may be inf or nan (callers
    keep only the lower triangle).
    """
    c = gc.shape[-2]
    rel = gc - gc[..., c // 2 : c // 2 + 1, :]
    up, down = rel.exp(), (-rel).exp()
    kt = (k * down).transpose(-1, -2)
    kk, qk = (k * up) @ kt, (q * up) @ kt
    wide = rel.abs().amax((-1, -2)) > _MAX_HALF_SPAN  # [B, H, N]
    if bool(wide.any()):
        incl = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        gw, kw, qw = gc[wide], k[wide], q[wide]
        diff = gw.unsqueeze(-2) - gw.unsqueeze(-3)
        pair = torch.where(incl[..., None], diff, torch.full_like(diff, float("-inf"))).exp()
        kk[wide] = torch.einsum("...rk,...rsk,...sk->...rs", kw, pair, kw)
        qk[wide] = torch.einsum("...rk,...rsk,...sk->...rs", qw, pair, kw)
    return kk, qk.tril()


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = CHUNK_SIZE,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunk-parallel KDA (prefill path); same arguments and results as :func:`recurrent_kda`.

    ``T`` need not be a multiple of ``chunk_size``: the tail is padded with ``k = 0,
    beta = 0, g = 0`` tokens, which leave the state unchanged.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    dtype = v.dtype
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    scale = dk**-0.5 if scale is None else scale
    c = chunk_size
    n = -(-t // c)
    pad = n * c - t

    def prep(x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if pad:
            x = F.pad(x, (0,) * (2 * (x.dim() - 2)) + (0, pad))
        # [B, T, H, ...] -> [B, H, N, C, ...], contiguous so every op sees one layout
        return x.reshape(b, n, c, *x.shape[2:]).movedim(3, 1).contiguous()

    q, k, v, g, beta = prep(q) * scale, prep(k), prep(v), prep(g), prep(beta)
    gc = g.cumsum(-2)  # [B, H, N, C, K] in-chunk cumulative log decay
    kk, qk = _chunk_scores(q, k, gc)
    a = (kk * beta[..., None]).tril(-1)
    eye = torch.eye(c, device=q.device)
    # (I + A) [U | W] = beta [V | exp(G) K]: one unit-lower-triangular solve per chunk.
    rhs = torch.cat((v, gc.exp() * k), dim=-1) * beta[..., None]
    uw = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
    u, w = uw[..., :dv], uw[..., dv:]
    q_dec = gc.exp() * q  # [B, H, N, C, K]
    k_tail = (gc[..., -1:, :] - gc).exp() * k  # decay from each token to the chunk end
    tail = gc[..., -1, :].exp()  # [B, H, N, K]

    s = q.new_zeros(b, h, dk, dv) if initial_state is None else initial_state.float().clone()
    out = q.new_empty(b, h, n, c, dv)
    for i in range(n):
        delta = u[:, :, i] - w[:, :, i] @ s  # [B, H, C, V]
        out[:, :, i] = q_dec[:, :, i] @ s + qk[:, :, i] @ delta
        s = tail[:, :, i, :, None] * s + k_tail[:, :, i].transpose(-1, -2) @ delta
    o = out.movedim(1, 3).reshape(b, n * c, h, dv)[:, :t]
    return o.to(dtype), (s if output_final_state else None)


def short_conv(
    x: torch.Tensor, weight: torch.Tensor, window: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv + SiLU over time, continuing from ``window``.

    Args:
        x: ``[B, T, C]`` new inputs.
        weight: ``[C, 1, W]`` (HF ``Conv1d`` layout).
        window: ``[B, W - 1, C]`` the previous ``W - 1`` inputs (zeros at sequence start).

    Returns:
        ``(silu(conv(x)) [B, T, C], new window [B, W - 1, C])``.
    """
    b, t, ch = x.shape
    width = weight.shape[-1]
    if window is None:
        window = x.new_zeros(b, width - 1, ch)
    ext = torch.cat((window.to(x.dtype), x), dim=1)  # [B, W - 1 + T, C]
    y = F.conv1d(ext.transpose(1, 2), weight.to(x.dtype), groups=ch).transpose(1, 2)
    return F.silu(y), ext[:, ext.shape[1] - (width - 1) :]


class KimiDeltaAttention(nn.Module):
    """KDA layer: short convs, lower-bounded decay, delta rule, per-head RMSNorm, gate.

    Parameter names follow Kimi Linear's ``self_attn`` (``q_proj``, ``q_conv1d``,
    ``f_a_proj``/``f_b_proj`` decay logit, ``A_log``, ``dt_bias``, ``b_proj`` beta,
    ``g_proj`` full-rank output gate, ``o_norm``, ``o_proj``).
    """

    def __init__(self, config: K3Config) -> None:
        super().__init__()
        la = config.linear_attn_config
        d, h, hd = config.hidden_size, la.num_heads, la.head_dim
        di = h * hd
        self.num_heads, self.head_dim = h, hd
        self.lower_bound = la.gate_lower_bound
        self.q_proj = StableLinear(d, di, bias=False)
        self.k_proj = StableLinear(d, di, bias=False)
        self.v_proj = StableLinear(d, di, bias=False)
        self.q_conv1d = nn.Conv1d(di, di, la.short_conv_kernel_size, groups=di, bias=False)
        self.k_conv1d = nn.Conv1d(di, di, la.short_conv_kernel_size, groups=di, bias=False)
        self.v_conv1d = nn.Conv1d(di, di, la.short_conv_kernel_size, groups=di, bias=False)
        self.f_a_proj = StableLinear(d, hd, bias=False)
        self.f_b_proj = StableLinear(hd, di, bias=False)
        self.A_log = nn.Parameter(torch.zeros(1, 1, h, 1))  # report: A_h initialised at 0
        self.dt_bias = nn.Parameter(torch.zeros(di))
        self.b_proj = StableLinear(d, h, bias=False)
        if not la.use_full_rank_gate:
            raise NotImplementedError("only the K3 full-rank output gate is implemented")
        self.g_proj = StableLinear(d, di, bias=False)
        self.o_norm = RMSNorm(hd, config.rms_norm_eps)
        self.o_proj = StableLinear(di, d, bias=False)

    def conv_weight(self) -> torch.Tensor:
        """The q | k | v conv weights stacked ``[3 * H * K, 1, W]`` (one window for all three)."""
        return torch.cat((self.q_conv1d.weight, self.k_conv1d.weight, self.v_conv1d.weight))

    def forward(
        self,
        x: torch.Tensor,
        conv_state: torch.Tensor | None = None,
        recurrent_state: torch.Tensor | None = None,
        *,
        mode: str = "chunk",
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [B, T, d]`` -> ``(y [B, T, d], conv_state [B, W-1, 3*H*K], S [B, H, K, V])``.

        ``mode`` picks :func:`chunk_kda` (prefill) or :func:`recurrent_kda` (decode); both
        continue from the given states (zeros when None).
        """
        b, t, _ = x.shape
        h, hd = self.num_heads, self.head_dim
        qkv = torch.cat((self.q_proj(x), self.k_proj(x), self.v_proj(x)), dim=-1)
        qkv, conv_state = short_conv(qkv, self.conv_weight(), conv_state)
        q, k, v = qkv.view(b, t, 3, h, hd).unbind(2)
        q = F.normalize(q.float(), p=2, dim=-1, eps=1e-6)
        k = F.normalize(k.float(), p=2, dim=-1, eps=1e-6)
        g = kda_lowerbound_gate(
            self.f_b_proj(self.f_a_proj(x)).view(b, t, h, hd), self.A_log, self.dt_bias,
            self.lower_bound,
        )  # fmt: skip
        beta = stable_sigmoid(self.b_proj(x).float())  # [B, T, H]
        fn = kda_kernels(x.device, mode)
        o, s = fn(
            q=q, k=k, v=v.float(), g=g, beta=beta, initial_state=recurrent_state,
            output_final_state=True,
        )  # fmt: skip
        o = rms_norm(o, self.o_norm.weight, self.o_norm.eps).to(x.dtype)  # per-head RMSNorm
        gate = torch.sigmoid(self.g_proj(x)).view(b, t, h, hd)
        y = self.o_proj((gate * o).reshape(b, t, h * hd))
        assert s is not None
        return y, conv_state, s
