"""Fused MXFP4 MoE: the CPU torch path and the Triton kernel against the naive reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from services.model.arch.testing import assert_close
from services.model.kernels.moe import fused_moe_dense, fused_moe_mxfp4
from services.model.kernels.naive import naive_fused_moe_mxfp4
from services.model.quant.mxfp4 import dequantize_mxfp4, quantize_mxfp4

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


def _case(t: int, e: int = 8, k: int = 3, lw: int = 64, im: int = 64, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    w13 = quantize_mxfp4(torch.randn(e, 2 * im, lw, generator=gen) / 4)
    w2 = quantize_mxfp4(torch.randn(e, lw, im, generator=gen) / 4)
    x = torch.randn(t, lw, generator=gen) * 3
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)]).reshape(t, k)
    wts = torch.rand(t, k, generator=gen)
    return x, ids, wts, *w13, *w2


@pytest.mark.parametrize("t", [1, 7, 40], ids=lambda t: f"T{t}")
def test_fused_torch_path_matches_naive(t: int) -> None:
    args = _case(t)
    assert_close("y", naive_fused_moe_mxfp4(*args), fused_moe_mxfp4(*args), 1e-6)


def test_mxfp4_path_equals_dense_path_on_dequantised_weights() -> None:
    x, ids, wts, p13, s13, p2, s2 = _case(9)
    dense = fused_moe_dense(x, ids, wts, dequantize_mxfp4(p13, s13), dequantize_mxfp4(p2, s2))
    assert_close("y", dense, fused_moe_mxfp4(x, ids, wts, p13, s13, p2, s2), 1e-6)


def test_outputs_are_bounded_by_situ() -> None:
    """Each expert's hidden activation is bounded by b1*b2 even for huge inputs."""
    x, ids, wts, *w = _case(5)
    y = fused_moe_mxfp4(x * 1e6, ids, wts, *w)
    assert torch.isfinite(y).all()


_CHECK = """
import os, torch
from services.model.kernels.triton_moe import triton_fused_moe_mxfp4
from services.model.kernels.moe import fused_moe_mxfp4
from services.model.quant.mxfp4 import quantize_mxfp4
dev = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(0)
worst = 0.0
for t, e, k, lw, im in [(1, 8, 2, 64, 64), (13, 8, 3, 64, 96), (33, 16, 4, 96, 64)]:
    w13 = quantize_mxfp4(torch.randn(e, 2 * im, lw, generator=gen) / 4)
    w2 = quantize_mxfp4(torch.randn(e, lw, im, generator=gen) / 4)
    x = torch.randn(t, lw, generator=gen)
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)])
    wts = torch.rand(t, k, generator=gen)
    ref = fused_moe_mxfp4(x, ids, wts, *w13, *w2)
    args = [a.to(dev) for a in (x, ids, wts, *w13, *w2)]
    out = triton_fused_moe_mxfp4(*args).cpu()
    err = float(((out - ref).pow(2).mean() / ref.pow(2).mean()).sqrt())
    worst = max(worst, err)
print("REL_RMS", worst)
"""


def test_triton_kernel_matches_torch_path() -> None:
    """On CUDA natively; on the CPU under TRITON_INTERPRET=1 (in a subprocess, since the
    interpreter must be chosen before kernels are defined)."""
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run(
        [sys.executable, "-c", _CHECK], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    err = float(res.stdout.split("REL_RMS")[-1])
    assert err <= 1e-5, err


def test_moe_layer_picks_the_kernel_by_device() -> None:
    from services.model.arch import K3Config, K3ForCausalLM

    experts = K3ForCausalLM(K3Config.preset("tiny")).model.layers[1].block_sparse_moe.experts
    x = torch.zeros(2, experts.width)
    assert experts.mxfp4 and not experts.uses_triton(x)  # CPU: the torch path
    experts.kernel = "triton"
    assert experts.uses_triton(x)
    experts.kernel = "fast"
    with pytest.raises(ValueError, match="kernel must be"):
        experts.uses_triton(x)


_LAYER = """
import torch
from services.model.arch import K3Config, K3ForCausalLM
model = K3ForCausalLM(K3Config.preset("tiny")).init_weights(0).eval()
dev = "cuda" if torch.cuda.is_available() else "cpu"
moe = model.model.layers[1].block_sparse_moe.to(dev)
x = torch.randn(7, model.config.hidden_size, generator=torch.Generator().manual_seed(1)).to(dev)
with torch.no_grad():
    moe.experts.kernel = "auto" if dev == "cuda" else "triton"
    assert moe.experts.uses_triton(x)
    fast = moe(x).cpu()
    moe.experts.kernel = "torch"
    ref = moe.cpu()(x.cpu())
print("REL_RMS", float(((fast - ref).pow(2).mean() / ref.pow(2).mean()).sqrt()))
"""


def test_moe_layer_on_the_triton_kernel_matches_the_torch_path() -> None:
    """The model's MoE layer through the Triton kernel (CUDA: by default; CPU: forced, under
    TRITON_INTERPRET=1) gives the torch path's output, fp32 dots in IEEE precision (no TF32)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    res = subprocess.run(
        [sys.executable, "-c", _LAYER], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert float(res.stdout.split("REL_RMS")[-1]) <= 1e-5
