"""Comparison helper for reference-vs-fast tests (fla's ``assert_close`` idea)."""

from __future__ import annotations

import torch

__all__ = ["rel_rms_error", "assert_close"]


def rel_rms_error(ref: torch.Tensor, out: torch.Tensor) -> float:
    """``rms(out - ref) / rms(ref)`` in float64 (0 when both are zero)."""
    ref64, out64 = ref.double(), out.double()
    num = (out64 - ref64).pow(2).mean().sqrt()
    den = ref64.pow(2).mean().sqrt()
    if den == 0:
        return float(num)
    return float(num / den)


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, ratio: float) -> None:
    """Fail unless shapes match, ``out`` is finite, and the relative RMS error is <= ratio."""
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), f"{name}: non-finite values"
    err = rel_rms_error(ref, out)
    diff = (out.double() - ref.double()).abs().max().item()
    assert err <= ratio, f"{name}: relative RMS error {err:.3e} > {ratio:.1e} (max abs {diff:.3e})"
