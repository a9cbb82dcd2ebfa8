"""Stable LatentMoE (report §2.3) and the dense MLP of the first layer.

``y = sum_j E_shared_j(x) + W_up RMSNorm( sum_{i in topk} p_i E_i(W_down x) )``

- router: ``s = sigmoid(W_r x)``; experts chosen by top-k of ``s + b`` (``b`` =
  ``e_score_correction_bias``, set by quantile balancing during training, frozen here);
  mixture weights from the unbiased scores, ``p = s / sum_topk s`` (times
  ``routed_scaling_factor``);
- shared experts work at full width ``d``; routed experts in the latent width ``l``;
- every GLU is SiTU-GLU (``hidden_act = "situ"``); routed experts are MXFP4 when the
  config's ``quantization_config`` says so (everything else stays in high precision);
- MXFP4 experts run the fused Triton kernel on CUDA and the vectorised torch path elsewhere
  (:attr:`RoutedExperts.kernel` forces one: ``"auto"``, ``"triton"``, ``"torch"``).

Checkpoint names (Kimi Linear / K3): ``gate.weight``, ``gate.e_score_correction_bias``,
``shared_experts.{gate,up,down}_proj``, ``routed_expert_{down_proj,norm,up_proj}``,
``experts.{e}.w{1,2,3}.weight[_packed|_scale]`` (w1 gate, w3 up, w2 down); the experts
are held stacked as ``w13`` / ``w2`` and split per expert by the checkpoint module.
"""

from __future__ import annotations

import torch
from torch import nn

from ..kernels.moe import fused_moe_dense, fused_moe_mxfp4
from ..kernels.stable import StableLinear, stable_linear, stable_sigmoid
from .activation import situ_glu, swiglu
from .config import K3Config
from .norm import RMSNorm

__all__ = ["GatedMLP", "Router", "RoutedExperts", "StableLatentMoE"]


class GatedMLP(nn.Module):
    """``down(act(gate(x), up(x)))`` at full width: the dense layer and the shared experts."""

    def __init__(self, config: K3Config, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = StableLinear(hidden, intermediate, bias=False)
        self.up_proj = StableLinear(hidden, intermediate, bias=False)
        self.down_proj = StableLinear(intermediate, hidden, bias=False)
        self.act = config.hidden_act
        self.betas = (config.activation_situ_beta, config.activation_situ_linear_beta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, u = self.gate_proj(x), self.up_proj(x)
        h = situ_glu(g, u, *self.betas) if self.act == "situ" else swiglu(g, u)
        return self.down_proj(h)


class Router(nn.Module):
    """Sigmoid router with a selection-only bias (``gate`` in checkpoints)."""

    def __init__(self, config: K3Config) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_token
        self.renormalize = config.moe_renormalize
        self.scaling = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        nn.init.normal_(self.weight, std=config.hidden_size**-0.5)
        # Quantile-balancing bias: used for selection only, never in the mixture weights.
        self.register_buffer("e_score_correction_bias", torch.zeros(config.num_experts))

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """``x [N, d]`` -> ``s [N, E]`` fp32 sigmoid scores."""
        return stable_sigmoid(stable_linear(x.float(), self.weight.float()))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(topk_ids [N, k], topk_weights [N, k] fp32, scores [N, E])``."""
        s = self.scores(x)
        ids = torch.topk(s + self.e_score_correction_bias.float(), self.top_k, dim=-1).indices
        w = s.gather(-1, ids)
        if self.renormalize:
            w = w / w.sum(-1, keepdim=True)
        return ids, w * self.scaling, s


class RoutedExperts(nn.Module):
    """``E`` SiTU-GLU experts in the routed width, stacked; MXFP4 or dense storage.

    MXFP4 storage is four uint8 buffers (``w13_packed [E, 2I, L/2]``, ``w13_scale
    [E, 2I, L/32]``, ``w2_packed [E, L, I/2]``, ``w2_scale [E, L, I/32]``); dense storage
    is ``w13 [E, 2I, L]`` and ``w2 [E, L, I]`` parameters.
    """

    def __init__(self, config: K3Config) -> None:
        super().__init__()
        e, lw, im = config.num_experts, config.routed_width, config.moe_intermediate_size
        self.num_experts, self.width, self.intermediate = e, lw, im
        self.betas = (config.activation_situ_beta, config.activation_situ_linear_beta)
        self.mxfp4 = config.experts_mxfp4
        self.kernel = "auto"
        if self.mxfp4:
            u8 = torch.uint8
            self.register_buffer("w13_packed", torch.zeros(e, 2 * im, lw // 2, dtype=u8))
            self.register_buffer("w13_scale", torch.full((e, 2 * im, lw // 32), 127, dtype=u8))
            self.register_buffer("w2_packed", torch.zeros(e, lw, im // 2, dtype=u8))
            self.register_buffer("w2_scale", torch.full((e, lw, im // 32), 127, dtype=u8))
        else:
            self.w13 = nn.Parameter(torch.randn(e, 2 * im, lw) * lw**-0.5)
            self.w2 = nn.Parameter(torch.randn(e, lw, im) * im**-0.5)

    def uses_triton(self, x: torch.Tensor) -> bool:
        """Whether the MXFP4 experts take the Triton kernel for ``x`` (CUDA, unless forced)."""
        if self.kernel not in ("auto", "triton", "torch"):
            raise ValueError(f"kernel must be auto, triton or torch, not {self.kernel!r}")
        return self.kernel == "triton" or (self.kernel == "auto" and x.is_cuda)

    def forward(
        self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor
    ) -> torch.Tensor:
        """``x [N, L]`` -> ``u = sum_j p_j E_j(x)`` ``[N, L]`` fp32."""
        b1, b2 = self.betas
        if self.mxfp4 and self.uses_triton(x):
            from ..kernels.triton_moe import triton_fused_moe_mxfp4

            return triton_fused_moe_mxfp4(
                x, topk_ids, topk_weights, self.w13_packed, self.w13_scale,
                self.w2_packed, self.w2_scale, beta1=b1, beta2=b2,
            )  # fmt: skip
        if self.mxfp4:
            return fused_moe_mxfp4(
                x, topk_ids, topk_weights, self.w13_packed, self.w13_scale,
                self.w2_packed, self.w2_scale, beta1=b1, beta2=b2,
            )  # fmt: skip
        return fused_moe_dense(x, topk_ids, topk_weights, self.w13, self.w2, beta1=b1, beta2=b2)


class StableLatentMoE(nn.Module):
    """Shared experts at full width + routed SiTU-GLU experts in a normalised latent space."""

    def __init__(self, config: K3Config) -> None:
        super().__init__()
        d = config.hidden_size
        self.gate = Router(config)
        self.shared_experts = (
            GatedMLP(config, d, config.moe_intermediate_size * config.num_shared_experts)
            if config.num_shared_experts
            else None
        )
        self.latent = config.routed_expert_hidden_size is not None
        if self.latent:
            lw = config.routed_width
            self.routed_expert_down_proj = StableLinear(d, lw, bias=False)
            self.routed_expert_up_proj = StableLinear(lw, d, bias=False)
            self.routed_expert_norm = (
                RMSNorm(lw, config.rms_norm_eps) if config.latent_moe_use_norm else None
            )
        self.experts = RoutedExperts(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Token-wise: ``x [N, d]`` -> ``[N, d]``."""
        ids, w, _ = self.gate(x)
        z = self.routed_expert_down_proj(x) if self.latent else x
        u = self.experts(z, ids, w).to(x.dtype)
        if self.latent:
            if self.routed_expert_norm is not None:
                u = self.routed_expert_norm(u)
            u = self.routed_expert_up_proj(u)
        if self.shared_experts is not None:
            u = u + self.shared_experts(x)
        return u
