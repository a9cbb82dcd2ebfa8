"""Reference implementations beside the fast paths (STYLE §3): same signatures, written
as the report states the math, fp32, slow on purpose.

- :func:`naive_recurrent_kda` / :func:`naive_kda_lowerbound_gate`: KDA recurrence and
  decay gate, for :func:`~services.model.arch.kda.chunk_kda`,
  :func:`~services.model.arch.kda.recurrent_kda` and
  :func:`~services.model.arch.kda.kda_lowerbound_gate`;
- :func:`naive_mla_attention`: gated-MLA attention as plain multi-head attention over
  keys and values up-projected from the latent, for
  :func:`~services.model.arch.mla.mla_attend_recompute` / ``mla_attend_absorbed``;
- :func:`naive_situ_glu`: the scalar definition, for
  :func:`~services.model.arch.activation.situ_glu`;
- :func:`naive_full_attn_res_forward`: the model with *full* Attention Residuals (every
  layer's output kept as its own source), which Block AttnRes with one layer per block
  must reproduce.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "naive_recurrent_kda",
    "naive_kda_lowerbound_gate",
    "naive_mla_attention",
    "naive_situ_glu",
    "naive_full_attn_res_forward",
]


def naive_kda_lowerbound_gate(
    z: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor | None, lower_bound: float
) -> torch.Tensor:
    """``g[..., h, c] = g_min / (1 + exp(-exp(A_log[h]) * (z + dt_bias)))``, elementwise."""
    h, k = z.shape[-2:]
    out = torch.empty(z.shape, dtype=torch.float32)
    zf = z.float().reshape(-1, h, k)
    flat = out.view(-1, h, k)
    for hi in range(h):
        a = math.exp(float(A_log.reshape(-1)[hi]))
        for c in range(k):
            b = 0.0 if dt_bias is None else float(dt_bias.reshape(h, k)[hi, c])
            flat[:, hi, c] = lower_bound / (1.0 + torch.exp(-a * (zf[:, hi, c] + b)))
    return out


def naive_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Report eq. 1 per batch, head and token:
    ``S = (I - beta k k^T) Diag(exp(g)) S + beta k v^T``, ``o = S^T (scale q)``."""
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    scale = dk**-0.5 if scale is None else scale
    out = torch.zeros(b, t, h, dv)
    final = torch.zeros(b, h, dk, dv)
    eye = torch.eye(dk)
    for bi in range(b):
        for hi in range(h):
            s = torch.zeros(dk, dv) if initial_state is None else initial_state[bi, hi].float()
            for ti in range(t):
                kt = k[bi, ti, hi].float()
                bt = float(beta[bi, ti, hi])
                decay = torch.diag(g[bi, ti, hi].float().exp())
                s = (eye - bt * torch.outer(kt, kt)) @ decay @ s + bt * torch.outer(
                    kt, v[bi, ti, hi].float()
                )
                out[bi, ti, hi] = s.t() @ (scale * q[bi, ti, hi].float())
            final[bi, hi] = s
    return out.to(v.dtype), (final if output_final_state else None)


def naive_mla_attention(
    q: torch.Tensor, latent: torch.Tensor, kv_b: torch.Tensor, dims: tuple[int, int, int, int]
) -> torch.Tensor:
    """Per batch and head: ``softmax(q k^T / sqrt(d) + causal) v`` with
    ``[k_nope | v] = W_kv_b c`` and ``k = [k_nope | k_pe]`` (no rotation: NoPE)."""
    r, nope, rope, dv = dims
    b, t, h, _ = q.shape
    s = latent.shape[1]
    out = torch.zeros(b, t, h, dv)
    for bi in range(b):
        c = latent[bi, :, :r].float()
        k_pe = latent[bi, :, r:].float()
        kv = (c @ kv_b.float().t()).view(s, h, nope + dv)
        for hi in range(h):
            k = torch.cat((kv[:, hi, :nope], k_pe), dim=-1)  # [S, nope+rope]
            v = kv[:, hi, nope:]
            for ti in range(t):
                pos = s - t + ti  # absolute position of this query
                logits = (k[: pos + 1] @ q[bi, ti, hi].float()) / math.sqrt(nope + rope)
                out[bi, ti, hi] = torch.softmax(logits, 0) @ v[: pos + 1]
    return out


def naive_situ_glu(
    gate: torch.Tensor, up: torch.Tensor, beta1: float, beta2: float
) -> torch.Tensor:
    """``[b1 tanh(g/b1) sigmoid(g)] [b2 tanh(u/b2)]`` in float64, elementwise."""
    g, u = gate.double(), up.double()
    sig = 1.0 / (1.0 + torch.exp(-g))
    return (beta1 * torch.tanh(g / beta1) * sig * beta2 * torch.tanh(u / beta2)).to(gate.dtype)


def naive_full_attn_res_forward(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Stateless forward with **full** AttnRes (report eq. 8-9), ignoring block size.

    Sources for layer ``l``'s attention: the embedding and the outputs ``f_i`` (attention +
    FFN) of every earlier layer; its FFN also sees its own attention output. The output
    head mixes the embedding and all layer outputs. Uses ``model``'s weights.
    """
    from .attnres import apply_attn_res

    core = model.model
    b, t = input_ids.shape
    x = core.embed_tokens(input_ids.reshape(-1))
    sources = [x]
    for layer in core.layers:
        h = apply_attn_res(sources, layer.self_attention_res_norm, layer.self_attention_res_proj)
        a = layer.self_attn(layer.input_layernorm(h).view(b, t, -1))[0].reshape(b * t, -1)
        h = apply_attn_res([*sources, a], layer.mlp_res_norm, layer.mlp_res_proj)
        sources.append(a + layer.ffn(layer.post_attention_layernorm(h)))
    h = apply_attn_res(sources, core.output_attn_res_norm, core.output_attn_res_proj)
    return model.lm_head(core.norm(h)).float().view(b, t, -1)
