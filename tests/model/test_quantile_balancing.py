"""Quantile balancing: a skewed router reaches max/mean load <= 1.05 within 3 updates."""

from __future__ import annotations

import pytest
import torch

from services.model.arch.quantile import (
    QuantileBalancer,
    expert_load,
    qb_cutoffs,
    qb_exact_bias,
)

N, K, D = 16, 4, 32


class SkewedRouter:
    """Sigmoid router whose logits carry a +-3 per-expert skew (loads ~3x apart)."""

    def __init__(self, seed: int = 0) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.w = torch.randn(D, N, generator=self.gen)
        self.skew = torch.linspace(-3, 3, N)

    def scores(self, m: int) -> torch.Tensor:
        return torch.sigmoid(torch.randn(m, D, generator=self.gen) @ self.w * 0.3 + self.skew)


def _imbalance(load: torch.Tensor) -> float:
    return float(load.max() / load.float().mean())


@pytest.mark.parametrize("mode", ["exact", "histogram"])
def test_skewed_router_balances_within_three_updates(mode: str) -> None:
    router = SkewedRouter()
    qb = QuantileBalancer(N, K, num_bins=1000, mode=mode)
    bias = torch.zeros(N)
    first = None
    for _ in range(3):  # step t routes with b_t and yields b_{t+1}
        s = router.scores(32768)
        first = first or _imbalance(expert_load(s, bias, K))
        qb.observe(s[:16384], bias)  # two micro-batches: counts accumulate
        qb.observe(s[16384:], bias)
        bias = qb.update()
    held_out = router.scores(32768)  # a batch the bias never saw
    assert first > 2.5
    assert _imbalance(expert_load(held_out, bias, K)) <= 1.05
    assert abs(float(bias.mean())) < 1e-5  # centred


def test_report_cutoff_variant_also_converges() -> None:
    """The report's single (k+1)-th cutoff per token: slower, still monotone here."""
    s = SkewedRouter(1).scores(32768)
    bias, loads = torch.zeros(N), []
    for _ in range(5):
        loads.append(_imbalance(expert_load(s, bias, K)))
        bias = qb_exact_bias(s, bias, K, cutoff="k+1")
    assert all(b < a for a, b in zip(loads, loads[1:], strict=False))
    assert loads[-1] < 1.15


def test_histogram_estimate_is_within_a_bin_of_exact() -> None:
    s = SkewedRouter(2).scores(20000)
    bias = torch.linspace(-0.2, 0.2, N)
    exact, hist = QuantileBalancer(N, K, mode="exact"), QuantileBalancer(N, K, num_bins=500)
    exact.observe(s, bias)
    hist.observe(s, bias)
    width = (0.2 + 1 - (-0.2 - 1)) / 500
    assert (exact.update() - hist.update()).abs().max() <= 2 * width


def test_bias_moves_selection_only_from_the_next_step() -> None:
    """observe() leaves the bias alone, and the bias never enters the mixture weights."""
    s = SkewedRouter(3).scores(256)
    bias = torch.zeros(N)
    qb = QuantileBalancer(N, K)
    qb.observe(s, bias)
    assert torch.equal(bias, torch.zeros(N))
    new = qb.update()
    ids = torch.topk(s + new, K, dim=-1).indices
    weights = s.gather(-1, ids) / s.gather(-1, ids).sum(-1, keepdim=True)
    assert torch.allclose(weights.sum(-1), torch.ones(256))
    assert not torch.equal(expert_load(s, new, K), expert_load(s, bias, K))


def test_cutoffs_come_from_one_top_k_plus_1() -> None:
    s = torch.tensor([[0.875, 0.75, 0.625, 0.125]])  # exact in binary
    zero = torch.zeros(4)
    assert qb_cutoffs(s, zero, 2, cutoff="k+1").tolist() == [[0.625] * 4]
    # Selected experts must stay above the (k+1)-th, the others must beat the k-th.
    assert qb_cutoffs(s, zero, 2).tolist() == [[0.625, 0.625, 0.75, 0.75]]


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="top_k"):
        QuantileBalancer(4, 4)
    with pytest.raises(RuntimeError, match="observe"):
        QuantileBalancer(4, 2).update()
