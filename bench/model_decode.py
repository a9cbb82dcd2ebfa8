"""CPU decode throughput of a tiny K3 preset through forward_ragged with state pools, and
expert memory in bits/param for MXFP4 vs bf16.

    .venv/bin/python bench/model_decode.py [--preset tiny] [--steps 32] [--threads 1]

Each batch size prefills its requests (prompt of --prompt tokens, chunked into one step),
then times --steps decode steps (one token per request per step). The baseline is the
same model with bf16-sized dense experts (fp32 compute on CPU): the ratio shows what the
on-the-fly MXFP4 dequantisation costs on a CPU, where it saves memory but not time.
"""

from __future__ import annotations

import argparse
import time

import torch

from services.model.arch import K3Config, K3ForCausalLM, StatePools
from services.model.quant.mxfp4 import dequantize_mxfp4


def expert_bits_per_param(model: K3ForCausalLM) -> tuple[float, float]:
    """(MXFP4 bits/param as stored, bf16 bits/param) over all routed experts."""
    nbytes = params = 0
    for layer in model.model.layers:
        if layer.is_moe:
            ex = layer.block_sparse_moe.experts
            for t in (ex.w13_packed, ex.w13_scale, ex.w2_packed, ex.w2_scale):
                nbytes += t.numel()
            params += 2 * (ex.w13_packed.numel() + ex.w2_packed.numel())
    return 8 * nbytes / params, 16.0


def dense_copy(model: K3ForCausalLM) -> K3ForCausalLM:
    """The same weights with dense (dequantised) experts."""
    cfg = model.config.model_copy(deep=True)
    cfg.quantization_config = None
    dense = K3ForCausalLM(cfg).eval()
    sd = {k: v for k, v in model.state_dict().items() if ".experts." not in k}
    dense.load_state_dict(sd, strict=False)
    with torch.no_grad():
        for src, dst in zip(model.model.layers, dense.model.layers, strict=True):
            if src.is_moe:
                a, b = src.block_sparse_moe.experts, dst.block_sparse_moe.experts
                b.w13.copy_(dequantize_mxfp4(a.w13_packed, a.w13_scale).to(torch.bfloat16))
                b.w2.copy_(dequantize_mxfp4(a.w2_packed, a.w2_scale).to(torch.bfloat16))
    return dense


def decode_tokens_per_s(model: K3ForCausalLM, batch: int, prompt: int, steps: int) -> float:
    pools = StatePools(model.config, max_requests=batch, max_tokens=batch * (prompt + steps + 16))
    states = [pools.allocate() for _ in range(batch)]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        prompts = [
            torch.randint(0, model.config.vocab_size, (prompt,), generator=gen) for _ in states
        ]
        logits = model.forward_ragged(prompts, states, pools, last_only=True)
        nxt = [lg.argmax(-1) for lg in logits]
        model.forward_ragged(nxt, states, pools, last_only=True)  # warm-up decode step
        t0 = time.perf_counter()
        for _ in range(steps):
            logits = model.forward_ragged(nxt, states, pools, last_only=True)
            nxt = [lg.argmax(-1) for lg in logits]
        dt = time.perf_counter() - t0
    return batch * steps / dt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batches", default="1,8")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg = K3Config.preset(args.preset)
    model = K3ForCausalLM(cfg).init_weights(0).eval()
    dense = dense_copy(model)
    mx_bits, bf16_bits = expert_bits_per_param(model)
    total, active = cfg.parameter_count()
    print(
        f"preset {args.preset}: {total / 1e6:.2f}M params ({active / 1e6:.2f}M active), "
        f"torch threads {args.threads}, prompt {args.prompt}, {args.steps} decode steps"
    )
    print(
        f"routed-expert memory: MXFP4 {mx_bits:.3f} bits/param vs bf16 {bf16_bits:.0f} "
        f"bits/param ({bf16_bits / mx_bits:.2f}x smaller)"
    )
    for b in (int(x) for x in args.batches.split(",")):
        mx = decode_tokens_per_s(model, b, args.prompt, args.steps)
        de = decode_tokens_per_s(dense, b, args.prompt, args.steps)
        print(
            f"batch {b}: {mx:8.1f} tok/s MXFP4 experts | {de:8.1f} tok/s dense experts | "
            f"ratio {mx / de:.2f}"
        )


if __name__ == "__main__":
    main()
