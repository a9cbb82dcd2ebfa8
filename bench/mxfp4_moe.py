"""Routed-expert MoE with MXFP4 weights vs bf16 weights: tokens/s, and on a GPU the achieved
weight bandwidth against the device's peak.

    .venv/bin/python bench/mxfp4_moe.py [--tokens 1,16,256] [--experts 32] [--top-k 4]
                                        [--width 512] [--inter 256] [--threads 1]

On CUDA the MXFP4 path is the fused Triton kernel (``triton_fused_moe_mxfp4``, IEEE fp32 dots)
and the baseline is the torch path over bf16 experts on the same device; on the CPU both are the
vectorised torch paths (``fused_moe_mxfp4`` dequantising on the fly, ``fused_moe_dense`` over
bf16 weights). Bandwidth counts the bytes of the experts a call touches (each active expert's
weights once), divided by the call's time: decode-sized batches are bound by it, so that is the
figure to hold against the peak.
"""

from __future__ import annotations

import argparse
import time

import torch

from services.model.kernels.moe import fused_moe_dense, fused_moe_mxfp4
from services.model.quant.mxfp4 import dequantize_mxfp4, quantize_mxfp4

#: Peak HBM bandwidth (bytes/s) of GPUs this may run on, by a substring of the device name.
PEAK_BANDWIDTH = {
    "H200": 4.8e12,
    "H100": 3.35e12,
    "H800": 3.35e12,
    "A100": 2.0e12,
    "L40S": 0.864e12,
    "L4": 0.3e12,
}


def peak_bandwidth(name: str) -> float | None:
    return next((bw for key, bw in PEAK_BANDWIDTH.items() if key in name), None)


def timed(fn, device: str, repeats: int) -> float:  # type: ignore[no-untyped-def]
    """Median seconds per call after a warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="1,16,256")
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--width", type=int, default=512, help="routed (latent) width L")
    p.add_argument("--inter", type=int, default=256, help="expert intermediate size I")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    e, k, lw, im = args.experts, args.top_k, args.width, args.inter
    gen = torch.Generator().manual_seed(0)
    w13 = quantize_mxfp4(torch.randn(e, 2 * im, lw, generator=gen) / 8)
    w2 = quantize_mxfp4(torch.randn(e, lw, im, generator=gen) / 8)
    mx = [t.to(device) for t in (*w13, *w2)]
    bf13 = dequantize_mxfp4(*w13).to(device, torch.bfloat16)
    bf2 = dequantize_mxfp4(*w2).to(device, torch.bfloat16)
    mx_bytes_per_expert = sum(t[0].numel() for t in mx)  # uint8 packed values + scales
    bf_bytes_per_expert = 2 * (bf13[0].numel() + bf2[0].numel())
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    peak = peak_bandwidth(name) if device == "cuda" else None
    print(
        f"{name}: E={e} k={k} L={lw} I={im}; expert weights {mx_bytes_per_expert / 2**20:.2f} MiB "
        f"MXFP4 vs {bf_bytes_per_expert / 2**20:.2f} MiB bf16 "
        f"({bf_bytes_per_expert / mx_bytes_per_expert:.2f}x smaller)"
    )
    if device == "cuda":
        from services.model.kernels.triton_moe import triton_fused_moe_mxfp4

        mxfp4_path = triton_fused_moe_mxfp4
        label = "triton MXFP4"
    else:
        mxfp4_path = fused_moe_mxfp4
        label = "torch MXFP4"
    for t in (int(x) for x in args.tokens.split(",")):
        x = torch.randn(t, lw, generator=gen).to(device)
        ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)]).to(device)
        wts = torch.rand(t, k, generator=gen).to(device)
        active = int(ids.unique().numel())
        s_mx = timed(lambda: mxfp4_path(x, ids, wts, *mx), device, args.repeats)  # noqa: B023
        s_bf = timed(
            lambda: fused_moe_dense(x.to(torch.bfloat16), ids, wts, bf13, bf2),  # noqa: B023
            device,
            args.repeats,
        )
        line = (
            f"tokens {t:4d} ({active:3d} experts active): {label} {t / s_mx:10.1f} tok/s | "
            f"torch bf16 {t / s_bf:10.1f} tok/s | speed-up {s_bf / s_mx:5.2f}x"
        )
        if device == "cuda":
            bw_mx = active * mx_bytes_per_expert / s_mx
            bw_bf = active * bf_bytes_per_expert / s_bf
            line += (
                f" | weight bandwidth {bw_mx / 1e9:7.1f} GB/s MXFP4, {bw_bf / 1e9:7.1f} GB/s bf16"
            )
            if peak:
                line += f" ({bw_mx / peak:.1%} / {bw_bf / peak:.1%} of {peak / 1e12:.2f} TB/s peak)"
        print(line)


if __name__ == "__main__":
    main()
