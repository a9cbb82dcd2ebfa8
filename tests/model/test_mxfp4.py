"""MXFP4: OCP E2M1/E8M0 quantisation and compressed-tensors' packed layout."""

from __future__ import annotations

import pytest
import torch

from services.model.quant.mxfp4 import (
    dequantize_mxfp4,
    e2m1_decode,
    e2m1_encode,
    pack_codes,
    quantize_mxfp4,
    unpack_codes,
)


def _row(*head: float) -> list[float]:
    return list(head) + [0.0] * (32 - len(head))


# Hand-computed: code = magnitude index (0, .5, 1, 1.5, 2, 3, 4, 6 -> 0..7) | sign << 3,
# byte j = code[2j] | code[2j+1] << 4; scale byte = 127 + shared exponent.
ROW_A = _row(0.5, -1.0, 1.5, 6.0, 0.0, -0.0, 3.0, -4.0)
BYTES_A = [0xA1, 0x73, 0x80, 0xE5] + [0x00] * 12
ROW_B = [v / 8 for v in ROW_A]  # amax 0.75 -> exponent -3 -> same codes, scale 124
ROW_C = _row(7.5, 1.0)  # amax 7.5: the two scale rules differ here


def test_packing_is_byte_identical_to_compressed_tensors_layout() -> None:
    w = torch.tensor([ROW_A, ROW_B])
    packed, scale = quantize_mxfp4(w)
    assert packed.dtype == torch.uint8 and packed.shape == (2, 16)
    assert scale.dtype == torch.uint8 and scale.shape == (2, 1)
    assert packed[0].tolist() == BYTES_A and packed[1].tolist() == BYTES_A
    assert scale[:, 0].tolist() == [127, 124]
    assert torch.equal(dequantize_mxfp4(packed, scale), w)


@pytest.mark.parametrize(
    "rule,scale_byte,first_byte",
    [("ocp", 127, 0x27), ("round_pow2", 128, 0x16)],
    ids=["ocp", "compressed_tensors_round_pow2"],
)
def test_scale_rules(rule: str, scale_byte: int, first_byte: int) -> None:
    """OCP saturates 7.5 to 6 at scale 1; compressed-tensors rounds amax up to 8 first."""
    packed, scale = quantize_mxfp4(torch.tensor([ROW_C]), scale_rule=rule)
    assert scale.item() == scale_byte
    assert packed[0, 0].item() == first_byte


def test_round_to_nearest_even_and_saturation() -> None:
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0, 6.5, 100.0, -1e9])
    got = e2m1_decode(e2m1_encode(x)).tolist()
    assert got == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -4.0, 6.0, 6.0, -6.0]


def test_round_trip_is_exact_on_representable_values() -> None:
    """Any dequantised MXFP4 tensor quantises back to the same bytes and values."""
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (8, 128), generator=gen, dtype=torch.uint8)
    codes[:, ::32] = 7  # every block holds +6, so its amax fixes the scale exactly
    packed = pack_codes(codes)
    scale = torch.randint(110, 145, (8, 4), generator=gen, dtype=torch.uint8)
    w = dequantize_mxfp4(packed, scale)
    p2, s2 = quantize_mxfp4(w)
    assert torch.equal(s2, scale) and torch.equal(p2, packed)
    assert torch.equal(dequantize_mxfp4(p2, s2), w)
    for rule in ("ocp", "round_pow2"):  # values are exact under either scale rule
        assert torch.equal(dequantize_mxfp4(*quantize_mxfp4(w, scale_rule=rule)), w)


def test_unpack_inverts_pack_and_low_nibble_is_even_column() -> None:
    codes = torch.arange(16, dtype=torch.uint8).repeat(2, 2)
    assert torch.equal(unpack_codes(pack_codes(codes)), codes)
    assert pack_codes(torch.tensor([[0x3, 0xC]], dtype=torch.uint8)).item() == 0xC3


def test_quantisation_error_is_bounded() -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(16, 256, generator=gen)
    deq = dequantize_mxfp4(*quantize_mxfp4(w))
    blocks = w.view(16, 8, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    # At scale 2^(floor(log2 amax) - 2): rounding costs at most half the 4 -> 6 gap (1 step
    # of the scale), saturation of amax/scale in (6, 8) at most 2.
    scale = torch.exp2(torch.floor(torch.log2(amax)) - 2)
    err = (deq.view(16, 8, 32) - blocks).abs()
    assert (err <= 2 * scale).all()
    unsat = blocks.abs() <= 6 * scale
    assert (err[unsat] <= scale.expand_as(err)[unsat]).all()


def test_rejects_width_not_multiple_of_32() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_mxfp4(torch.zeros(2, 48))
