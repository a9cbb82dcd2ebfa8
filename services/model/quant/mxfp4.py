"""MXFP4 (OCP Microscaling v1.0): E2M1 elements with one E8M0 scale per 32 elements.

Storage follows compressed-tensors' ``mxfp4-pack-quantized`` format, which is what K3's
routed-expert tensors use:

- ``weight_packed`` uint8 ``[out, in / 2]``: element code = E2M1 magnitude index (0..7 for
  0, .5, 1, 1.5, 2, 3, 4, 6) | sign << 3; column ``2j`` in the low nibble, ``2j + 1`` in
  the high nibble;
- ``weight_scale`` uint8 ``[out, in / 32]``: E8M0, the scale is ``2 ** (byte - 127)``
  (0xFF is NaN in the spec; never produced here).

Quantisation (``scale_rule="ocp"``, the default) is the spec's: ``X = 2 **
(floor(log2(amax)) - 2)`` (2 = emax of E2M1), elements ``v / X`` rounded to nearest,
ties to even, saturating at +-6. ``scale_rule="round_pow2"`` reproduces compressed-tensors'
``generate_mxfp4_scales``, which first rounds amax to the nearest power of two (amax in
``[1.75, 2) * 2^k`` goes to ``2^(k+1)``) so that no element clips.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = [
    "E2M1_VALUES",
    "BLOCK",
    "quantize_mxfp4",
    "dequantize_mxfp4",
    "pack_codes",
    "unpack_codes",
    "e2m1_encode",
    "e2m1_decode",
    "mxfp4_round_trip",
]

BLOCK = 32
E2M1_EMAX = 2  # 6 = 1.5 * 2**2
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# All 16 codes: index | sign << 3.
_CODE_TO_FLOAT = torch.tensor(list(E2M1_VALUES) + [-v for v in E2M1_VALUES], dtype=torch.float32)


def e2m1_decode(codes: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """4-bit codes (any integer dtype, values 0..15) -> float values."""
    return _CODE_TO_FLOAT.to(codes.device, dtype)[codes.long()]


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Float values (already divided by the block scale) -> 4-bit codes (uint8).

    Round to nearest, ties to even (even = even code, i.e. mantissa bit 0), saturate at
    +-6. The sign bit follows ``signbit`` so ``-0.0`` encodes as 0x8, as in
    compressed-tensors.
    """
    a = x.abs().float()
    # Midpoints between consecutive magnitudes; a tie goes to the even code.
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=x.device)
    idx = torch.bucketize(a, mids, right=False)  # a <= mid -> lower code
    # bucketize(right=False) sends a == mid to the lower index; fix ties with odd lower code.
    tie = (idx < 7) & (a == mids[idx.clamp(max=6)])
    lower_is_odd = (idx % 2) == 1
    idx = torch.where(tie & lower_is_odd, idx + 1, idx)
    idx = torch.where(torch.isnan(a), torch.zeros_like(idx), idx)
    sign = torch.signbit(x).to(torch.uint8) << 3
    return idx.to(torch.uint8) | sign


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Codes ``[..., n]`` (n even) -> bytes ``[..., n / 2]``; even column in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"last dim must be even to pack, got {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return (c[..., 0::2] & 0x0F) | ((c[..., 1::2] & 0x0F) << 4)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """Bytes ``[..., m]`` -> codes ``[..., 2m]`` (inverse of :func:`pack_codes`)."""
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def _block_exponent(amax: torch.Tensor, scale_rule: str) -> torch.Tensor:
    """Shared exponent per block, an int32 in [-127, 127]."""
    amax = amax.float()
    _, e = torch.frexp(amax)  # amax = m * 2**e, m in [0.5, 1) -> floor(log2) = e - 1
    exp = e.to(torch.int32) - 1
    if scale_rule == "round_pow2":
        # compressed-tensors: add 0.25 to the mantissa (1.m) and truncate -> bump at >= 1.75.
        m, _ = torch.frexp(amax)
        exp = exp + (m * 2 >= 1.75).to(torch.int32)
    elif scale_rule != "ocp":
        raise ValueError(f"scale_rule must be 'ocp' or 'round_pow2', got {scale_rule!r}")
    exp = exp - E2M1_EMAX
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -127))
    return exp.clamp(-127, 127)


def quantize_mxfp4(
    w: torch.Tensor, *, scale_rule: Literal["ocp", "round_pow2"] = "ocp"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise ``w [..., n]`` (n % 32 == 0) -> (``weight_packed [..., n/2]``, ``weight_scale [..., n/32]``)."""
    n = w.shape[-1]
    if n % BLOCK:
        raise ValueError(f"MXFP4 needs the last dim to be a multiple of {BLOCK}, got {n}")
    blocks = w.float().reshape(*w.shape[:-1], n // BLOCK, BLOCK)
    exp = _block_exponent(blocks.abs().amax(-1), scale_rule)  # [..., n/32]
    scaled = torch.ldexp(blocks, -exp.unsqueeze(-1).float())
    codes = e2m1_encode(scaled).reshape(*w.shape[:-1], n)
    return pack_codes(codes), (exp + 127).to(torch.uint8)


def dequantize_mxfp4(
    packed: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(``weight_packed [..., n/2]``, ``weight_scale [..., n/32]``) -> ``[..., n]`` in ``dtype``."""
    vals = e2m1_decode(unpack_codes(packed), torch.float32)  # [..., n]
    n = vals.shape[-1]
    vals = vals.reshape(*vals.shape[:-1], n // BLOCK, BLOCK)
    exp = scale.to(torch.int32) - 127
    out = torch.ldexp(vals, exp.unsqueeze(-1).float())
    return out.reshape(*vals.shape[:-2], n).to(dtype)


def mxfp4_round_trip(w: torch.Tensor, **kw) -> torch.Tensor:
    """``dequantize(quantize(w))``: what a weight becomes once stored in MXFP4."""
    return dequantize_mxfp4(*quantize_mxfp4(w, **kw), dtype=w.dtype)
