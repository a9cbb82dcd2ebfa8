"""The measurer's checks of one call's outputs, with its own torch and its own reference.

The reference and the fp64 oracle are computed here, in the trusted process, from the very
input tensors the measurer wrote into the candidate's memory; the candidate's outputs arrive
as raw bytes. Dtype, shape and strides must match the reference's; values must pass
``allclose`` and the oracle bound; sentinels, repeats of earlier outputs and the signature of
lowered precision name their detectors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, Field

POISON_SENTINEL = 0x7FC0BEEF


class DetectorHit(BaseModel):
    detector: str
    evidence: str


class CheckResult(BaseModel):
    phase: str = Field(description="warmup, trial, timing or a probe: pointer, near, one, repeat.")
    seed: int
    shape: dict[str, int]
    ok: bool
    detail: str = ""
    check: str = Field("", description="The first check this call failed (value, oracle, dtype, "
                       "shape, stride, outputs, tensor, fit, decode); empty when it passed.")  # fmt: skip


def _decode(meta: dict[str, Any], raw: bytes) -> torch.Tensor:
    dtype = getattr(torch, str(meta.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {meta.get('dtype')!r}")
    shape = [int(s) for s in meta["shape"]]
    if math.prod(shape) * torch.empty(0, dtype=dtype).element_size() != len(raw):
        raise ValueError(f"{len(raw)} bytes do not hold shape {shape} of {dtype}")
    return (
        torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
        if raw
        else torch.empty(shape, dtype=dtype)
    )


def _norm_err(y: torch.Tensor, oracle: torch.Tensor) -> float:
    o = oracle.double()
    scale = max(float(o.abs().max()) if o.numel() else 0.0, 1e-30)
    return float((y.double() - o).abs().max()) / scale if o.numel() else 0.0


def low_precision_signature(y: torch.Tensor) -> str:
    """Values computed in float16/bfloat16 and cast back are exactly representable there; an
    fp32 computation's are almost never (about 1 in 2**13 for float16, 2**16 for bfloat16)."""
    if y.dtype not in (torch.float32, torch.float64) or y.numel() < 64:
        return ""
    flat = y.reshape(-1)
    flat = flat[:: max(1, flat.numel() // 4096)]  # a strided sample is enough for a share
    finite = flat[torch.isfinite(flat) & (flat != 0)]
    if finite.numel() < 64:
        return ""
    for low in (torch.bfloat16, torch.float16):
        share = float((finite.to(low).to(y.dtype) == finite).double().mean())
        if share > 0.9:
            return f"{share:.0%} of its values are exact {str(low).removeprefix('torch.')} numbers"
    return ""


class OutputJudge:
    """Checks each candidate call's outputs against the reference; collects detector hits."""

    def __init__(self, task: Any, ref_module: Any) -> None:
        self.task, self.ref = task, ref_module
        self.hits: list[DetectorHit] = []
        self.checks: list[CheckResult] = []
        self.seen: dict[bytes, int] = {}  # output bytes -> index of the call that produced them

    def flag(self, detector: str, evidence: str) -> None:
        if not any(h.detector == detector and h.evidence == evidence for h in self.hits):
            self.hits.append(DetectorHit(detector=detector, evidence=evidence))

    def expected(
        self, inputs: tuple[torch.Tensor, ...]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        as_list = lambda r: list(r) if isinstance(r, tuple | list) else [r]  # noqa: E731
        ref = self.ref.reference(*(x.clone() for x in inputs))
        if hasattr(self.ref, "oracle"):
            orc = self.ref.oracle(*(x.clone() for x in inputs))
        else:
            orc = self.ref.reference(
                *(x.double() if x.is_floating_point() else x.clone() for x in inputs)
            )
        return as_list(ref), as_list(orc)

    def check(self, index: int, call: Any) -> bool:
        where = f"{call.kind} call {index + 1}"
        problems = self._compare(index, call, where)
        self.checks.append(
            CheckResult(
                phase=call.kind,
                seed=call.seed,
                shape=call.shape,
                ok=not problems,
                detail="; ".join(p for _, p in problems),
                check=problems[0][0] if problems else "",
            )  # fmt: skip
        )
        return not problems

    def _compare(self, index: int, call: Any, where: str) -> list[tuple[str, str]]:
        """The failed checks of one call, (check name, what failed), first failure first."""
        tol = self.task.tolerance
        refs, oracles = self.expected(call.inputs)
        metas = call.metas
        if len(metas) != len(refs):
            return [("outputs", f"returned {len(metas)} outputs, expected {len(refs)}")]
        problems: list[tuple[str, str]] = []
        for i, (meta, ref, orc) in enumerate(zip(metas, refs, oracles, strict=True)):
            if not isinstance(meta, dict) or not meta.get("tensor"):
                t = meta.get("type") if isinstance(meta, dict) else "?"
                self.flag("lazy_output", f"{where}: output {i} is a {t}, not a tensor")
                return [("tensor", f"output {i} is not a tensor")]
            if not meta.get("exact"):
                self.flag(
                    "lazy_output",
                    f"{where}: output {i} is a {meta.get('type')} (a tensor subclass)",
                )
            if meta.get("too_large") or meta.get("invalid") or "raw" not in meta:
                problems.append(("fit", f"output {i} does not fit the output buffer"))
                continue
            raw = meta["raw"]
            words = np.frombuffer(raw[: len(raw) // 4 * 4], dtype=np.uint32)
            poison = int((words == POISON_SENTINEL).sum())
            if poison and poison == words.size:
                self.flag("uninitialized_output", f"{where}: output {i} is all poison sentinel: a tensor an earlier "
                          "call returned (poisoned after it: a cache) or memory never written")  # fmt: skip
            elif poison:
                self.flag(
                    "uninitialized_output",
                    f"{where}: {poison} words never written (poison sentinel)",
                )
            if meta.get("dtype") != str(ref.dtype).removeprefix("torch."):
                if meta.get("dtype") in {"float16", "bfloat16"}:
                    self.flag("lowered_precision", f"{where}: output {i} is {meta.get('dtype')}")
                problems.append(("dtype", f"output {i} dtype {meta.get('dtype')} != {ref.dtype}"))
                continue
            if list(meta.get("shape", [])) != list(ref.shape):
                problems.append(
                    ("shape", f"output {i} shape {meta.get('shape')} != {list(ref.shape)}")
                )
                continue
            if list(meta.get("stride", [])) != list(ref.stride()):
                problems.append(("stride", f"output {i} strides {meta.get('stride')} != "
                                 f"{list(ref.stride())} (must be contiguous)"))  # fmt: skip
                continue
            try:
                got = _decode(meta, raw)
            except (ValueError, KeyError, TypeError) as exc:
                problems.append(("decode", f"output {i}: {exc}"))
                continue
            # a "one" probe changed a single input element, which need not reach every output:
            # there a repeat is evidence only when it is also wrong
            earlier = self.seen.get(raw) if raw and call.kind != "repeat" else None
            if earlier is not None and call.kind != "one":
                self.flag(
                    "output_caching",
                    f"{where}: output {i} repeats the output of call {earlier + 1}",
                )
            self.seen.setdefault(raw, index)
            low = low_precision_signature(got)
            if low:
                self.flag("lowered_precision", f"{where}: output {i}: {low}")
            if not torch.allclose(got, ref, atol=tol.atol, rtol=tol.rtol, equal_nan=False):
                if earlier is not None and call.kind == "one":
                    self.flag("output_caching", f"{where}: one input element changed, yet output "
                              f"{i} is call {earlier + 1}'s: a stale answer keyed by part of the input")  # fmt: skip
                diff = (got.double() - ref.double()).abs()
                worst = float(diff.nan_to_num(float("inf")).max())
                problems.append(("value", f"max error {worst:.3e} in output {i}: it differs from "
                                 f"the reference beyond atol {tol.atol:g}, rtol {tol.rtol:g}"))  # fmt: skip
                continue
            err, err_ref = _norm_err(got, orc), _norm_err(ref, orc)
            bound = max(tol.oracle_factor * err_ref, tol.oracle_floor)
            if err > bound:
                problems.append(("oracle", f"max error {err:.2e} in output {i} against the "
                                 f"fp64 oracle, over the bound {bound:.2e}"))  # fmt: skip
        return problems
