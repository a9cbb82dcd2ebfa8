"""Gated MLA without position encoding (report §2.1.2).

Per token the cache holds the latent ``[c_kv (kv_lora_rank, after kv_a_layernorm) |
k_pe (qk_rope_head_dim)]``; ``k_pe`` keeps Kimi Linear's checkpoint layout but is never
rotated (NoPE), so it is simply a head-shared key part. Keys and values are
reconstructed from the latent by ``kv_b_proj``. The output gate is full rank:
``y = W_o [sigmoid(W_g x) * o]``.

Two ways to attend from the latent cache, same result:

- :func:`mla_attend_recompute`: up-project every cached latent to per-head k, v (the
  stateless reference forward);
- :func:`mla_attend_absorbed`: fold ``W_uk`` into the query and ``W_uv`` into the output
  so attention runs in the latent space (no per-token up-projection).

The serving path (:func:`mla_attend_paged`) attends in the latent space over pages read in
place: page by page for a decode, on fixed absolute tiles for a prefill.
"""

from __future__ import annotations

import torch
from torch import nn

from ..kernels.stable import StableLinear
from .config import K3Config
from .norm import RMSNorm

__all__ = [
    "KEY_TILE",
    "QUERY_TILE",
    "GatedMLA",
    "mla_attend_recompute",
    "mla_attend_absorbed",
    "mla_attend_paged",
]


def _causal_mask(t: int, s: int, device: torch.device) -> torch.Tensor:
    """``[T, S]`` True where query ``i`` (absolute position ``S - T + i``) may see key ``j``."""
    qpos = torch.arange(s - t, s, device=device)[:, None]
    return torch.arange(s, device=device)[None, :] <= qpos


def mla_attend_recompute(
    q: torch.Tensor, latent: torch.Tensor, kv_b: torch.Tensor, dims: tuple[int, int, int, int]
) -> torch.Tensor:
    """Attention of ``q [B, T, H, nope+rope]`` over ``latent [B, S, r+rope]`` (last T are the queries').

    ``kv_b`` is ``kv_b_proj.weight [H*(nope+v), r]``; ``dims = (r, nope, rope, v)``.
    Returns ``o [B, T, H, v]`` (fp32).
    """
    r, nope, rope, dv = dims
    b, t, h, _ = q.shape
    s = latent.shape[1]
    c, k_pe = latent.float().split((r, rope), dim=-1)
    kv = (c @ kv_b.float().t()).view(b, s, h, nope + dv)
    k_nope, v = kv.split((nope, dv), dim=-1)
    k = torch.cat((k_nope, k_pe[:, :, None, :].expand(b, s, h, rope)), dim=-1)
    scale = (nope + rope) ** -0.5
    scores = torch.einsum("bthd,bshd->bhts", q.float(), k) * scale
    scores = scores.masked_fill(~_causal_mask(t, s, q.device), float("-inf"))
    return torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v)


def mla_attend_absorbed(
    q: torch.Tensor, latent: torch.Tensor, kv_b: torch.Tensor, dims: tuple[int, int, int, int]
) -> torch.Tensor:
    """Same contract as :func:`mla_attend_recompute`, computed in the latent space."""
    r, nope, rope, dv = dims
    b, t, h, _ = q.shape
    s = latent.shape[1]
    w = kv_b.float().view(h, nope + dv, r)
    w_uk, w_uv = w[:, :nope], w[:, nope:]  # [H, nope, r], [H, v, r]
    c, k_pe = latent.float().split((r, rope), dim=-1)
    q_nope, q_pe = q.float().split((nope, rope), dim=-1)
    q_lat = torch.einsum("bthn,hnr->bthr", q_nope, w_uk)  # query in latent space
    scale = (nope + rope) ** -0.5
    scores = torch.einsum("bthr,bsr->bhts", q_lat, c) + torch.einsum("bthp,bsp->bhts", q_pe, k_pe)
    scores = (scores * scale).masked_fill(~_causal_mask(t, s, q.device), float("-inf"))
    o_lat = torch.einsum("bhts,bsr->bthr", scores.softmax(-1), c)
    return torch.einsum("bthr,hvr->bthv", o_lat, w_uv)


#: Prefill attention tiles (tokens). Fixed, and aligned to absolute positions, so a query row
#: meets the same keys in the same tiles however the prefill was split
#: (:mod:`services.model.kernels.stable` says why that matters).
QUERY_TILE = 128
KEY_TILE = 512


def mla_attend_paged(
    q: torch.Tensor,
    pages: list[torch.Tensor],
    kv_b: torch.Tensor,
    dims: tuple[int, int, int, int],
    *,
    absorbed: bool,
) -> torch.Tensor:
    """Attention of ``q [T, H, nope+rope]`` over latent pages read in place (no history gather).

    ``pages`` are views ``[n_i, r+rope]`` of consecutive token ranges starting at position 0;
    the queries are the last ``T`` positions. Both paths attend in the latent space (``W_uk``
    folded into the query, ``W_uv`` into the output) with an online softmax, so no contiguous
    copy of a request's latent history is made. ``absorbed`` (decode) combines page by page;
    otherwise (prefill) :func:`_attend_tiled`. Returns ``o [T, H, v]`` (fp32).
    """
    r, nope, rope, dv = dims
    t, h, _ = q.shape
    w = kv_b.float().view(h, nope + dv, r)
    w_uk, w_uv = w[:, :nope], w[:, nope:]
    if not absorbed:
        return _attend_tiled(q, pages, w_uk, w_uv, dims)
    total = sum(p.shape[0] for p in pages)
    qpos = torch.arange(total - t, total, device=q.device)[None, :, None]  # [1, T, 1]
    q_nope, q_pe = q.float().split((nope, rope), dim=-1)
    q_lat = torch.einsum("thn,hnr->htr", q_nope, w_uk)
    scale = (nope + rope) ** -0.5
    m = torch.full((h, t), float("-inf"), device=q.device)
    denom = torch.zeros(h, t, device=q.device)
    acc = torch.zeros(h, t, r, device=q.device)
    base = 0
    for page in pages:
        n = page.shape[0]
        c, k_pe = page.float().split((r, rope), dim=-1)
        scores = torch.einsum("htr,sr->hts", q_lat, c) + torch.einsum("thp,sp->hts", q_pe, k_pe)
        kpos = torch.arange(base, base + n, device=q.device)[None, None, :]
        scores = (scores * scale).masked_fill(kpos > qpos, float("-inf"))
        base += n
        m_new = torch.maximum(m, scores.amax(-1))
        alpha = (m - m_new).exp()
        p = (scores - m_new[..., None]).exp()
        denom = denom * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + p @ c
        m = m_new
    return torch.einsum("htr,hvr->thv", acc / denom[..., None], w_uv)


def _key_tile(pages: list[torch.Tensor], start: int, size: int) -> torch.Tensor:
    """Latent rows ``start .. start+size`` across ``pages``, zero-filled past the last token."""
    parts, base, stop = [], 0, start + size
    for page in pages:
        n = page.shape[0]
        lo, hi = max(start, base), min(stop, base + n)
        if lo < hi:
            parts.append(page[lo - base : hi - base].float())
        base += n
        if base >= stop:
            break
    got = sum(x.shape[0] for x in parts)
    if got < size:
        parts.append(pages[0].new_zeros(size - got, pages[0].shape[1], dtype=torch.float32))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _attend_tiled(
    q: torch.Tensor,
    pages: list[torch.Tensor],
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    dims: tuple[int, int, int, int],
) -> torch.Tensor:
    """Prefill attention on fixed absolute tiles: every op's shape is independent of the split.

    Queries are placed in ``QUERY_TILE`` rows at their absolute positions (zero rows pad a
    partial tile) and keys are read in ``KEY_TILE`` tiles (zeros past the last token); a query
    tile visits exactly the key tiles up to its own last position, oldest first. So a query
    row's arithmetic is the same whether the prefill ran in one forward or resumed from a
    cached prefix, which the prefix cache's equivalence bound relies on.
    """
    r, nope, rope, dv = dims
    t, h, _ = q.shape
    qt, kt = QUERY_TILE, KEY_TILE
    total = sum(p.shape[0] for p in pages)
    p0 = total - t
    i0, i1 = p0 // qt, (total - 1) // qt + 1  # absolute query tiles touched
    nq = i1 - i0
    front = p0 - i0 * qt
    qf = q.float().new_zeros(nq * qt, h, q.shape[-1])
    qf[front : front + t] = q.float()
    q_nope, q_pe = qf.view(nq, qt, h, -1).permute(2, 0, 1, 3).split((nope, rope), dim=-1)
    q_lat = q_nope @ w_uk[:, None]  # [H, nq, QT, r]: per head, [QT, nope] @ [nope, r]
    ql = torch.cat((q_lat, q_pe), dim=-1) * (nope + rope) ** -0.5  # [H, nq, QT, r+rope]
    qpos = torch.arange(i0 * qt, i1 * qt, device=q.device).view(nq, qt, 1)
    m = torch.full((h, nq, qt), float("-inf"), device=q.device)
    denom = torch.zeros(h, nq, qt, device=q.device)
    acc = torch.zeros(h, nq, qt, r, device=q.device)
    for j in range(((i1 * qt) - 1) // kt + 1):
        s = max(0, -(-(j * kt + 1) // qt) - 1 - i0)  # first query tile that reaches key tile j
        lat = _key_tile(pages, j * kt, kt)  # [KT, r+rope]
        kpos = torch.arange(j * kt, (j + 1) * kt, device=q.device)
        scores = (ql[:, s:] @ lat.t()).masked_fill(kpos > qpos[s:], float("-inf"))
        m_new = torch.maximum(m[:, s:], scores.amax(-1))
        alpha = (m[:, s:] - m_new).exp()
        p = (scores - m_new[..., None]).exp()
        denom[:, s:] = denom[:, s:] * alpha + p.sum(-1)
        acc[:, s:] = acc[:, s:] * alpha[..., None] + p @ lat[:, :r]
        m[:, s:] = m_new
    o = (acc / denom[..., None]) @ w_uv.transpose(1, 2)[:, None]  # [H, nq, QT, v]
    return o.reshape(h, nq * qt, dv)[:, front : front + t].transpose(0, 1)


class GatedMLA(nn.Module):
    """Gated multi-head latent attention, NoPE. Names follow Kimi Linear's MLA ``self_attn``."""

    def __init__(self, config: K3Config) -> None:
        super().__init__()
        d, h = config.hidden_size, config.num_attention_heads
        self.num_heads = h
        self.dims = (
            config.kv_lora_rank,
            config.qk_nope_head_dim,
            config.qk_rope_head_dim,
            config.v_head_dim,
        )
        qk = config.qk_nope_head_dim + config.qk_rope_head_dim
        self.q_lora_rank = config.q_lora_rank
        if config.q_lora_rank:
            self.q_a_proj = StableLinear(d, config.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, 1e-6)
            self.q_b_proj = StableLinear(config.q_lora_rank, h * qk, bias=False)
        else:
            self.q_proj = StableLinear(d, h * qk, bias=False)
        self.kv_a_proj_with_mqa = StableLinear(d, config.mla_latent_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(config.kv_lora_rank, 1e-6)
        self.kv_b_proj = StableLinear(
            config.kv_lora_rank, h * (config.qk_nope_head_dim + config.v_head_dim), bias=False
        )
        self.o_proj = StableLinear(h * config.v_head_dim, d, bias=False)
        self.use_gate = config.mla_use_output_gate
        if self.use_gate:
            self.g_proj = StableLinear(d, h * config.v_head_dim, bias=False)

    def query(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, T, d]`` -> ``q [B, T, H, nope+rope]``."""
        b, t, _ = x.shape
        if self.q_lora_rank:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        else:
            q = self.q_proj(x)
        return q.view(b, t, self.num_heads, -1)

    def latent(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, T, d]`` -> the cache entry ``[B, T, r + rope]`` (normalised c_kv | k_pe)."""
        r = self.dims[0]
        c, k_pe = self.kv_a_proj_with_mqa(x).split((r, self.dims[2]), dim=-1)
        return torch.cat((self.kv_a_layernorm(c), k_pe), dim=-1)

    def output(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """Gate and project ``o [B, T, H, v]`` -> ``[B, T, d]``."""
        b, t = x.shape[:2]
        o = o.reshape(b, t, -1).to(x.dtype)
        if self.use_gate:
            o = torch.sigmoid(self.g_proj(x)) * o
        return self.o_proj(o)

    def forward(
        self, x: torch.Tensor, past_latent: torch.Tensor | None = None, *, absorbed: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, T, d]`` after ``past_latent [B, P, r+rope]`` -> ``(y [B, T, d], new latent [B, T, r+rope])``."""
        new = self.latent(x)
        full = new if past_latent is None else torch.cat((past_latent.to(new.dtype), new), dim=1)
        attend = mla_attend_absorbed if absorbed else mla_attend_recompute
        o = attend(self.query(x), full, self.kv_b_proj.weight, self.dims)
        return self.output(x, o), new
