"""K3 / Kimi Linear model configuration.

Keys follow the public Kimi Linear ``config.json`` (``text_config`` of Kimi K3): a real
checkpoint's config loads with :meth:`K3Config.from_dict`, and :meth:`K3Config.to_dict`
writes one that the same loaders read back. Layer lists in ``linear_attn_config`` are
1-based, as in SGLang's ``is_kda_layer(i) = (i + 1) in kda_layers``.

Presets (:meth:`K3Config.preset`):

- ``k3``: the real sizes (2.78T total / 104.2B active, computed, never allocated);
- ``tiny``: the default served model, same structure at CPU size (vocab 2048);
- ``tiny-moe``: ``tiny`` with 64 routed experts top-8, for MoE benchmarks;
- ``small``: a larger CPU model (hidden 256, 12 layers, 32 experts);
- ``tiny-micro``: smaller than ``tiny`` (hidden 64, 4 layers: 3 KDA + 1 MLA, 2 heads, 8
  experts), the same hybrid layout; for CPU benches whose cache-off baseline re-prefills
  32K-token contexts dozens of times (``bench/prefix_cache.py --full``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

__all__ = ["K3Config", "LinearAttnConfig", "PRESETS"]


class LinearAttnConfig(BaseModel):
    """KDA settings (``linear_attn_config`` in Kimi Linear / K3 ``config.json``)."""

    model_config = ConfigDict(extra="allow")

    num_heads: int = Field(96, description="KDA heads (q, k and v share the count).")
    head_dim: int = Field(128, description="KDA head dim (d_k = d_v).")
    short_conv_kernel_size: int = Field(4, description="Causal depthwise conv width on q, k, v.")
    gate_lower_bound: float = Field(
        -5.0,
        description="g_min in g = g_min * sigmoid(exp(A) * z); bounds the per-step log decay "
        "so chunked kernels never overflow (report §2.1.1).",
    )
    use_full_rank_gate: bool = Field(
        True, description="K3: full-rank sigmoid output gate g_proj instead of g_a/g_b."
    )
    kda_layers: list[int] = Field(default_factory=list, description="1-based KDA layer ids.")
    full_attn_layers: list[int] = Field(
        default_factory=list, description="1-based gated-MLA layer ids."
    )


#: compressed-tensors' ``quantization_config`` for MXFP4 routed experts (weights only, W4A16):
#: one config group targeting every expert projection (w1 gate, w3 up, w2 down), E2M1 values in
#: groups of 32 with E8M0 (uint8) scales, packed two per byte; everything else unquantised.
#: vLLM and compressed-tensors loaders read it (a test parses it with the package).
MXFP4_EXPERTS_QUANTIZATION: dict[str, Any] = {
    "quant_method": "compressed-tensors",
    "format": "mxfp4-pack-quantized",
    "quantization_status": "compressed",
    "config_groups": {
        "group_0": {
            "targets": [r"re:.*block_sparse_moe\.experts\.\d+\.w[123]$"],
            "weights": {
                "num_bits": 4,
                "type": "float",
                "symmetric": True,
                "group_size": 32,
                "strategy": "group",
                "dynamic": False,
                "scale_dtype": "torch.uint8",
            },
            "input_activations": None,
            "output_activations": None,
            "format": "mxfp4-pack-quantized",
        }
    },
    "ignore": ["lm_head"],
}


class K3Config(BaseModel):
    """The architecture of a K3-style hybrid model (report §2).

    Unknown keys from a real ``config.json`` are kept (``extra="allow"``) so a config
    round-trips; the fields below are the ones the engine reads.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=False)

    model_type: str = "kimi_linear"
    vocab_size: int = 163840
    hidden_size: int = 7168
    intermediate_size: int = Field(33792, description="Width of the dense (first) layer MLP.")
    num_hidden_layers: int = 93
    num_attention_heads: int = Field(96, description="Gated-MLA heads.")
    num_key_value_heads: int | None = None
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False

    # Gated MLA (NoPE): the "rope" part of the key is kept for checkpoint compatibility but
    # never rotated (mla_use_nope), so the latent cache is kv_lora_rank + qk_rope_head_dim.
    q_lora_rank: int | None = Field(1536, description="None = direct q_proj (Kimi Linear).")
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    mla_use_nope: bool = True
    mla_use_output_gate: bool = True

    # Stable LatentMoE.
    num_experts: int = 896
    num_experts_per_token: int = Field(
        16, validation_alias=AliasChoices("num_experts_per_token", "num_experts_per_tok")
    )
    num_shared_experts: int = Field(
        2, validation_alias=AliasChoices("num_shared_experts", "n_shared_experts")
    )
    moe_intermediate_size: int = 3072
    routed_expert_hidden_size: int | None = Field(
        3584, description="Latent width l of the routed path; None = no latent projection."
    )
    latent_moe_use_norm: bool = Field(True, description="RMSNorm between aggregation and W_up.")
    first_k_dense_replace: int = Field(1, description="The first k layers use a dense MLP.")
    moe_renormalize: bool = True
    routed_scaling_factor: float = 1.0
    moe_router_activation_func: Literal["sigmoid"] = "sigmoid"
    num_expert_group: int = 1
    topk_group: int = 1
    hidden_act: Literal["situ", "silu"] = "situ"
    activation_situ_beta: float = Field(4.0, description="beta_1, soft cap of the gate branch.")
    activation_situ_linear_beta: float = Field(25.0, description="beta_2, cap of the up branch.")

    # Block Attention Residuals: layers per block (embedding is block 0).
    attn_res_block_size: int = 12

    linear_attn_config: LinearAttnConfig = Field(default_factory=LinearAttnConfig)
    quantization_config: dict[str, Any] | None = Field(
        default_factory=lambda: copy.deepcopy(MXFP4_EXPERTS_QUANTIZATION),
        description="compressed-tensors MXFP4 for routed experts; None = dense experts.",
    )
    eos_token_id: int | None = None
    bos_token_id: int | None = None
    pad_token_id: int | None = None

    @model_validator(mode="after")
    def _check(self) -> K3Config:
        la = self.linear_attn_config
        n = self.num_hidden_layers
        if not la.kda_layers and not la.full_attn_layers:
            # Default pattern of the report: 3 KDA : 1 MLA, plus MLA on the last layer.
            la.full_attn_layers = sorted({i for i in range(4, n + 1, 4)} | {n})
            la.kda_layers = [i for i in range(1, n + 1) if i not in la.full_attn_layers]
        ids = sorted(la.kda_layers + la.full_attn_layers)
        if ids != list(range(1, n + 1)):
            raise ValueError(
                "linear_attn_config.kda_layers and full_attn_layers must cover the 1-based "
                f"layers 1..{n} exactly once; got kda={la.kda_layers} mla={la.full_attn_layers}"
            )
        if self.num_experts_per_token > self.num_experts:
            raise ValueError("num_experts_per_token must be <= num_experts")
        if self.attn_res_block_size <= 0:
            raise ValueError("attn_res_block_size must be > 0")
        if self.experts_mxfp4:
            for name, width in (
                ("routed_expert_hidden_size", self.routed_width),
                ("moe_intermediate_size", self.moe_intermediate_size),
            ):
                if width % 32:
                    raise ValueError(f"MXFP4 experts need {name} % 32 == 0, got {width}")
        return self

    # ----- derived views -------------------------------------------------------------------
    @property
    def experts_mxfp4(self) -> bool:
        """Routed experts stored as MXFP4 (compressed-tensors ``mxfp4-pack-quantized``)."""
        q = self.quantization_config
        return bool(q) and "mxfp4" in str(q.get("format", "")).lower()

    @property
    def routed_width(self) -> int:
        """Width the routed experts work in (latent l, or d without a latent projection)."""
        return self.routed_expert_hidden_size or self.hidden_size

    def is_kda_layer(self, layer_idx: int) -> bool:
        """0-based ``layer_idx`` is a KDA layer (lists are 1-based)."""
        return (layer_idx + 1) in self.linear_attn_config.kda_layers

    def is_moe_layer(self, layer_idx: int) -> bool:
        return layer_idx >= self.first_k_dense_replace

    @property
    def kda_layer_ids(self) -> list[int]:
        """0-based KDA layers, in order; index into this = row of the KDA state pool."""
        return [i for i in range(self.num_hidden_layers) if self.is_kda_layer(i)]

    @property
    def mla_layer_ids(self) -> list[int]:
        """0-based MLA layers, in order; index into this = row of the latent KV pool."""
        return [i for i in range(self.num_hidden_layers) if not self.is_kda_layer(i)]

    @property
    def kda_dim(self) -> int:
        return self.linear_attn_config.num_heads * self.linear_attn_config.head_dim

    @property
    def mla_latent_dim(self) -> int:
        """Per-token, per-MLA-layer cache width: normalised c_kv plus the (unrotated) k_pe."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def num_attn_res_blocks(self) -> int:
        """Layer blocks (the last may be partial); the embedding adds one more source."""
        return -(-self.num_hidden_layers // self.attn_res_block_size)

    # ----- parameter count -----------------------------------------------------------------
    def _layer_params(self, layer_idx: int) -> tuple[int, int]:
        """(total, routed-expert-only params of ONE expert) for one decoder layer."""
        d = self.hidden_size
        la = self.linear_attn_config
        total = 2 * d  # input_layernorm, post_attention_layernorm
        total += 2 * (d + d)  # AttnRes: (norm weight [d], pseudo-query [1, d]) x 2 sublayers
        if self.is_kda_layer(layer_idx):
            di, hd, h = self.kda_dim, la.head_dim, la.num_heads
            total += 3 * di * d  # q, k, v
            total += 3 * di * la.short_conv_kernel_size  # short convs
            total += hd * d + di * hd  # f_a, f_b (low-rank decay logit)
            total += di + h  # dt_bias, A_log
            total += h * d  # b_proj (beta)
            total += di * d if la.use_full_rank_gate else (hd * d + di * hd)  # output gate
            total += hd  # o_norm (per-head RMSNorm)
            total += d * di  # o_proj
        else:
            h = self.num_attention_heads
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                total += self.q_lora_rank * d + self.q_lora_rank + h * qk * self.q_lora_rank
            else:
                total += h * qk * d
            total += (self.kv_lora_rank + self.qk_rope_head_dim) * d + self.kv_lora_rank
            total += h * (self.qk_nope_head_dim + self.v_head_dim) * self.kv_lora_rank
            total += d * h * self.v_head_dim  # o_proj
            if self.mla_use_output_gate:
                total += h * self.v_head_dim * d  # g_proj
        expert = 0
        if self.is_moe_layer(layer_idx):
            e, lw, im = self.num_experts, self.routed_width, self.moe_intermediate_size
            total += e * d + e  # router + e_score_correction_bias
            total += 3 * d * im * self.num_shared_experts  # shared experts at full width
            if self.routed_expert_hidden_size:
                total += 2 * d * lw  # W_down, W_up
                total += lw if self.latent_moe_use_norm else 0
            expert = 3 * lw * im  # w1 (gate), w3 (up), w2 (down)
            total += e * expert
        else:
            total += 3 * d * self.intermediate_size
        return total, expert

    def parameter_count(self) -> tuple[int, int]:
        """(total, active) parameters, computed analytically (nothing is allocated).

        Active = what one token touches: every dense weight, the shared experts and
        ``num_experts_per_token`` routed experts per MoE layer, and the LM head; the input
        embedding is a lookup and is not counted (the convention behind K3's 104.2B).
        """
        d, v = self.hidden_size, self.vocab_size
        total = v * d + d  # embedding, final norm
        total += 2 * d  # output AttnRes (norm + pseudo-query)
        total += 0 if self.tie_word_embeddings else v * d
        inactive = v * d  # the embedding lookup
        for i in range(self.num_hidden_layers):
            layer, expert = self._layer_params(i)
            total += layer
            if expert:
                inactive += (self.num_experts - self.num_experts_per_token) * expert
        return total, total - inactive

    # ----- presets and I/O -----------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> K3Config:
        """A named configuration; unknown names raise ``ValueError`` listing the choices."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls.model_validate(PRESETS[name])

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> K3Config:
        """From a ``config.json`` dict; a K3 wrapper's ``text_config`` is unwrapped."""
        if "text_config" in data and isinstance(data["text_config"], dict):
            data = data["text_config"]
        return cls.model_validate(data)

    @classmethod
    def from_json_file(cls, path: str | Path) -> K3Config:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _tiny(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        vocab_size=2048,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=8,
        num_attention_heads=4,
        q_lora_rank=64,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
        num_experts=16,
        num_experts_per_token=4,
        num_shared_experts=2,
        moe_intermediate_size=64,
        routed_expert_hidden_size=64,  # d / 2
        first_k_dense_replace=1,
        attn_res_block_size=3,  # blocks of 3, 3, 2 layers + embedding = 4 sources at the end
        linear_attn_config=dict(
            num_heads=4,
            head_dim=32,
            short_conv_kernel_size=4,
            gate_lower_bound=-5.0,
            use_full_rank_gate=True,
            kda_layers=[1, 2, 3, 5, 6, 7],
            full_attn_layers=[4, 8],
        ),
    )
    base.update(over)
    return base


_K3: dict[str, Any] = dict(
    vocab_size=163840,
    hidden_size=7168,
    intermediate_size=33792,
    num_hidden_layers=93,
    num_attention_heads=96,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    num_experts=896,
    num_experts_per_token=16,
    num_shared_experts=2,
    moe_intermediate_size=3072,
    routed_expert_hidden_size=3584,
    first_k_dense_replace=1,
    attn_res_block_size=12,
    linear_attn_config=dict(
        num_heads=96,
        head_dim=128,
        short_conv_kernel_size=4,
        gate_lower_bound=-5.0,
        use_full_rank_gate=True,
        full_attn_layers=[*range(4, 93, 4), 93],
        kda_layers=[i for i in range(1, 94) if i % 4 and i != 93],
    ),
)

PRESETS: dict[str, dict[str, Any]] = {
    "k3": _K3,
    "tiny": _tiny(),
    "tiny-moe": _tiny(num_experts=64, num_experts_per_token=8),
    "tiny-micro": _tiny(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=16,
        v_head_dim=16,
        num_experts=8,
        num_experts_per_token=2,
        num_shared_experts=1,
        moe_intermediate_size=32,
        routed_expert_hidden_size=32,
        attn_res_block_size=2,
        linear_attn_config=dict(
            num_heads=2,
            head_dim=32,
            kda_layers=[1, 2, 3],
            full_attn_layers=[4],
        ),
    ),
    "small": _tiny(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=12,
        num_attention_heads=4,
        q_lora_rank=128,
        kv_lora_rank=128,
        qk_nope_head_dim=64,
        qk_rope_head_dim=32,
        v_head_dim=64,
        num_experts=32,
        num_experts_per_token=4,
        moe_intermediate_size=128,
        routed_expert_hidden_size=128,
        attn_res_block_size=4,
        linear_attn_config=dict(
            num_heads=4,
            head_dim=64,
            kda_layers=[1, 2, 3, 5, 6, 7, 9, 10, 11],
            full_attn_layers=[4, 8, 12],
        ),
    ),
}
