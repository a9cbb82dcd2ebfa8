"""SiTU-GLU (report §2.3.2, appendix B): a SwiGLU whose two factors are soft-capped.

``SiTU-GLU(x) = [b1 tanh(W_g x / b1) * sigmoid(W_g x)] * [b2 tanh(W_u x / b2)]``, so every
output coordinate satisfies ``|y| < b1 * b2`` (100 for K3's b1 = 4, b2 = 25) while the
response near the origin matches SwiGLU to first order.
"""

from __future__ import annotations

import torch

__all__ = ["situ_glu", "swiglu"]


def situ_glu(gate: torch.Tensor, up: torch.Tensor, beta1: float, beta2: float) -> torch.Tensor:
    """Elementwise SiTU-GLU of the gate and up pre-activations (same shape)."""
    return (beta1 * torch.tanh(gate / beta1) * torch.sigmoid(gate)) * (
        beta2 * torch.tanh(up / beta2)
    )


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Unbounded SwiGLU, the limit of :func:`situ_glu` for large betas."""
    return gate * torch.sigmoid(gate) * up
