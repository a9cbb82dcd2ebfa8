"""K3ForCausalLM: the K3 hybrid decoder (KDA + gated MLA, Block AttnRes, Stable LatentMoE).

Interface used by the serving engine (``services/model/serving``):

- :meth:`K3ForCausalLM.forward_ragged` runs one engine step over several requests with
  different lengths (prefill chunks and one-token decodes mixed) against their
  :class:`~services.model.arch.state.RequestState` in :class:`StatePools`;
- :meth:`K3ForCausalLM.forward` is the stateless full-sequence forward (test reference).

Token-wise work (embedding, AttnRes mixes, norms, projections, MoE, LM head) runs once on
all the step's tokens concatenated; only the sequence mixers run per request: KDA
decodes (one token) of all requests are batched into one recurrent step over their
slots, KDA prefill chunks run the chunked kernel from the request's state, MLA attends
over the request's latent cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ..kernels.stable import StableLinear
from .attnres import apply_attn_res, make_attn_res
from .config import K3Config
from .kda import KimiDeltaAttention
from .mla import GatedMLA, mla_attend_paged
from .moe import GatedMLP, StableLatentMoE
from .norm import RMSNorm
from .state import PoolExhausted, RequestState, StatePools

__all__ = ["K3DecoderLayer", "K3Model", "K3ForCausalLM", "SequenceMixer"]

# (layer index, layer, normed input [N, d]) -> mixer output [N, d]
SequenceMixer = Callable[[int, "K3DecoderLayer", torch.Tensor], torch.Tensor]


class K3DecoderLayer(nn.Module):
    """One layer: AttnRes -> norm -> KDA or gated MLA; AttnRes -> norm -> dense MLP or MoE."""

    def __init__(self, config: K3Config, layer_idx: int) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.rms_norm_eps
        self.layer_idx = layer_idx
        self.is_kda = config.is_kda_layer(layer_idx)
        self.self_attn: KimiDeltaAttention | GatedMLA = (
            KimiDeltaAttention(config) if self.is_kda else GatedMLA(config)
        )
        self.is_moe = config.is_moe_layer(layer_idx)
        if self.is_moe:
            self.block_sparse_moe = StableLatentMoE(config)
        else:
            self.mlp = GatedMLP(config, d, config.intermediate_size)
        self.input_layernorm = RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.self_attention_res_norm, self.self_attention_res_proj = make_attn_res(d, eps)
        self.mlp_res_norm, self.mlp_res_proj = make_attn_res(d, eps)

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        """Token-wise FFN on ``x [N, d]``."""
        return self.block_sparse_moe(x) if self.is_moe else self.mlp(x)


class K3Model(nn.Module):
    """Embedding, decoder layers under Block AttnRes, output AttnRes and final norm."""

    def __init__(self, config: K3Config) -> None:
        super().__init__()
        d = config.hidden_size
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, d)
        self.layers = nn.ModuleList(
            K3DecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(d, config.rms_norm_eps)
        self.output_attn_res_norm, self.output_attn_res_proj = make_attn_res(d, config.rms_norm_eps)

    def run(self, x: torch.Tensor, mixer: SequenceMixer) -> torch.Tensor:
        """Run all layers on token-major ``x [N, d]`` (the embeddings); returns ``[N, d]``.

        ``mixer`` does the sequence mixing of each layer (it knows how tokens group into
        sequences); everything else here is token-wise.
        """
        size = self.config.attn_res_block_size
        blocks: list[torch.Tensor] = [x]  # b_0 = the token embedding
        partial: torch.Tensor | None = None  # sum of this block's sublayer outputs so far
        for i, layer in enumerate(self.layers):
            srcs = blocks if partial is None else [*blocks, partial]
            h = apply_attn_res(srcs, layer.self_attention_res_norm, layer.self_attention_res_proj)
            a = mixer(i, layer, layer.input_layernorm(h))
            partial = a if partial is None else partial + a
            h = apply_attn_res([*blocks, partial], layer.mlp_res_norm, layer.mlp_res_proj)
            partial = partial + layer.ffn(layer.post_attention_layernorm(h))
            if (i + 1) % size == 0:
                blocks.append(partial)
                partial = None
        srcs = blocks if partial is None else [*blocks, partial]
        h = apply_attn_res(srcs, self.output_attn_res_norm, self.output_attn_res_proj)
        return self.norm(h)


class K3ForCausalLM(nn.Module):
    """The K3 language model at any size given by :class:`K3Config`.

    A fresh instance has finite default weights (MXFP4 experts all zero); call
    :meth:`init_weights` for a seeded random model or load a checkpoint
    (:mod:`services.model.checkpoint`).
    """

    def __init__(self, config: K3Config, *, max_params: int | None = 50_000_000_000) -> None:
        """Build the modules; refuses configs above ``max_params`` (None = no limit).

        The guard keeps ``K3ForCausalLM(K3Config.preset("k3"))`` (2.78T parameters) from
        trying to allocate terabytes; build under ``torch.device("meta")`` with
        ``max_params=None`` to inspect such a model without memory.
        """
        super().__init__()
        total = config.parameter_count()[0]
        if max_params is not None and total > max_params:
            raise ValueError(
                f"this config has {total / 1e9:,.1f}B parameters, above max_params="
                f"{max_params / 1e9:,.0f}B; pass max_params=None to build it anyway"
            )
        self.config = config
        self.model = K3Model(config)
        self.lm_head = StableLinear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self._kda_row = {li: j for j, li in enumerate(config.kda_layer_ids)}
        self._mla_row = {li: j for j, li in enumerate(config.mla_layer_ids)}

    # ----- stateless -----------------------------------------------------------------------
    def forward(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """Stateless causal forward: ``input_ids [B, T]`` -> logits ``[B, T, V]`` (fp32)."""
        b, t = input_ids.shape

        def mixer(i: int, layer: K3DecoderLayer, h: torch.Tensor) -> torch.Tensor:
            x = h.view(b, t, -1)
            y = layer.self_attn(x)[0]
            return y.reshape(b * t, -1)

        x = self.model.embed_tokens(input_ids.reshape(-1))
        h = self.model.run(x, mixer)
        return self.lm_head(h).float().view(b, t, -1)

    # ----- ragged, stateful ----------------------------------------------------------------
    def forward_ragged(
        self,
        token_ids: list[torch.LongTensor],
        states: list[RequestState],
        pools: StatePools,
        *,
        last_only: bool = False,
    ) -> list[torch.Tensor]:
        """One step for several requests; appends to each state.

        Args:
            token_ids: per request, the new tokens ``[T_i]`` (a prefill chunk or one
                decode token); ``T_i >= 1``.
            states: per request, its state from ``pools`` (``num_tokens`` = tokens already
                processed); advanced by ``T_i`` on return.
            pools: the pools holding the states.
            last_only: return logits for each request's last token only (``[1, V]``).

        Returns:
            per request, logits ``[T_i, vocab_size]`` (fp32).

        Raises:
            PoolExhausted: not enough MLA blocks for the new tokens; no state changed.
            ValueError: mismatched lists, an empty chunk, or a freed state.
        """
        if len(token_ids) != len(states):
            raise ValueError(f"{len(token_ids)} token lists for {len(states)} states")
        if not token_ids:
            return []
        lens = [int(t.numel()) for t in token_ids]
        if min(lens) < 1:
            raise ValueError("every request needs at least one new token")
        if any(s.freed for s in states):
            raise ValueError("a state in this step was already freed")
        if len({s.slot for s in states}) != len(states):
            raise ValueError("a state appears twice in one step")
        taken: list[tuple[RequestState, list[int]]] = []
        try:
            for s, n in zip(states, lens, strict=True):
                taken.append((s, pools.reserve(s, n)))
        except PoolExhausted:
            for s, blocks in reversed(taken):
                pools.release(s, blocks)
            raise

        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n)
        device = pools.device
        # Prompt tokens always take the prefill kernels and generated ones the decode kernels, so
        # a token's arithmetic does not depend on how the scheduler chunked the prompt.
        is_decode = [
            n == 1 and (getattr(s, "prefill_end", None) is None or s.num_tokens >= s.prefill_end)
            for s, n in zip(states, lens, strict=True)
        ]
        decode = [r for r, d in enumerate(is_decode) if d]
        prefill = [r for r, d in enumerate(is_decode) if not d]
        dec_tok = torch.tensor([starts[r] for r in decode], dtype=torch.long, device=device)

        def mixer(i: int, layer: K3DecoderLayer, h: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(h)
            attn = layer.self_attn
            if isinstance(attn, KimiDeltaAttention):
                j = self._kda_row[i]
                if decode:  # all one-token requests in one batched recurrent step
                    dec_states = [states[r] for r in decode]
                    conv, s = pools.kda_read(dec_states, j)
                    y, conv, s = attn(h[dec_tok][:, None], conv, s, mode="recurrent")
                    out[dec_tok] = y[:, 0]
                    pools.kda_write(dec_states, j, conv, s)
                for r in prefill:
                    sl = slice(starts[r], starts[r + 1])
                    conv, s = pools.kda_read([states[r]], j)
                    y, conv, s = attn(h[sl][None], conv, s, mode="chunk")
                    out[sl] = y[0]
                    pools.kda_write([states[r]], j, conv, s)
            else:
                j = self._mla_row[i]
                kv_b = attn.kv_b_proj.weight
                for r, st in enumerate(states):
                    sl = slice(starts[r], starts[r + 1])
                    x = h[sl][None]
                    pools.write_latent(st, j, st.num_tokens, attn.latent(x)[0])
                    pages = pools.latent_pages(st, j, st.num_tokens + lens[r])
                    o = mla_attend_paged(
                        attn.query(x)[0], pages, kv_b, attn.dims, absorbed=is_decode[r]
                    )
                    out[sl] = attn.output(x, o[None])[0]
            return out

        ids = torch.cat([t.reshape(-1).to(device) for t in token_ids])
        h = self.model.run(self.model.embed_tokens(ids), mixer)
        if last_only:
            h = h[torch.tensor([e - 1 for e in starts[1:]], device=device)]
            logits = self.lm_head(h).float()
            result = [logits[r : r + 1] for r in range(len(states))]
        else:
            logits = self.lm_head(h).float()
            result = [logits[starts[r] : starts[r + 1]] for r in range(len(states))]
        for s, n in zip(states, lens, strict=True):
            s.num_tokens += n
        return result

    # ----- weights -------------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> K3ForCausalLM:
        """Random init with a fixed seed (fan-in scaled, so activations stay O(1)).

        Norm weights are 1, pseudo-queries small (near-uniform AttnRes mixes), KDA
        ``A_log = 0`` as in the report; MXFP4 experts are drawn dense and quantised.
        """
        from ..quant.mxfp4 import quantize_mxfp4

        gen = torch.Generator().manual_seed(seed)

        def normal(t: torch.Tensor, std: float) -> None:
            t.copy_(torch.randn(t.shape, generator=gen) * std)

        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
            elif name.endswith("_res_proj.weight"):
                normal(p, 0.5 / math.sqrt(p.shape[-1]))
            elif leaf == "A_log":
                p.zero_()
            elif leaf == "dt_bias":
                normal(p, 0.5)
            elif name.endswith("embed_tokens.weight"):
                normal(p, 1.0)
            elif p.dim() == 3 and "conv1d" in name:
                normal(p, 1.0 / math.sqrt(p.shape[-1]))
            elif p.dim() >= 2:
                normal(p, 1.0 / math.sqrt(p.shape[-1]))
            else:
                p.zero_()
        for layer in self.model.layers:
            if not layer.is_moe:
                continue
            ex = layer.block_sparse_moe.experts
            if ex.mxfp4:
                e, im, lw = ex.num_experts, ex.intermediate, ex.width
                w13 = torch.randn(e, 2 * im, lw, generator=gen) / math.sqrt(lw)
                w2 = torch.randn(e, lw, im, generator=gen) / math.sqrt(im)
                ex.w13_packed, ex.w13_scale = quantize_mxfp4(w13)
                ex.w2_packed, ex.w2_scale = quantize_mxfp4(w2)
            layer.block_sparse_moe.gate.e_score_correction_bias.zero_()
        return self
