"""Write a random-init checkpoint for a preset.

    python -m services.model.tools.init_checkpoint --preset tiny --out DIR [--seed 0]

The model is built in memory, so presets beyond ``--max-params`` are refused with a
clear message (``k3`` is 2.78T parameters: its size is computed, never allocated).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from ..arch.config import PRESETS, K3Config
from ..arch.model import K3ForCausalLM
from ..checkpoint import save_checkpoint

DEFAULT_MAX_PARAMS = 2_000_000_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="init_checkpoint", description=__doc__.splitlines()[0])
    p.add_argument("--preset", required=True, help=f"one of {sorted(PRESETS)}")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dense-experts", action="store_true", help="store routed experts unquantised")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--max-params", type=int, default=DEFAULT_MAX_PARAMS)
    args = p.parse_args(argv)
    try:
        config = K3Config.preset(args.preset)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dense_experts:
        config.quantization_config = None
    total, active = config.parameter_count()
    if total > args.max_params:
        print(
            f"error: preset {args.preset!r} has {total / 1e9:,.1f}B parameters "
            f"({active / 1e9:,.1f}B active); this tool allocates the whole model in memory and "
            f"refuses more than --max-params={args.max_params:,}. Use a real checkpoint for "
            "this size, or a smaller preset.",
            file=sys.stderr,
        )
        return 2
    t0 = time.time()
    model = K3ForCausalLM(config).init_weights(args.seed)
    dtype = torch.bfloat16 if args.dtype == "bfloat16" else None
    out = save_checkpoint(model, args.out, dtype=dtype)
    print(
        f"wrote {args.preset} ({total / 1e6:.2f}M params, {active / 1e6:.2f}M active, seed "
        f"{args.seed}) to {out} in {time.time() - t0:.1f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
