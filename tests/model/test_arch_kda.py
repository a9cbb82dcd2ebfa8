"""KDA: chunked prefill = recurrent decode = the token-loop reference = fla's naive code."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from services.model.arch.config import K3Config
from services.model.arch.kda import (
    KimiDeltaAttention,
    chunk_kda,
    kda_lowerbound_gate,
    recurrent_kda,
)
from services.model.arch.naive import naive_kda_lowerbound_gate, naive_recurrent_kda
from services.model.arch.testing import assert_close

torch.set_num_threads(1)


def _inputs(b: int, t: int, h: int, dk: int, dv: int, seed: int = 0, state: bool = True):
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(b, t, h, dk, generator=gen), dim=-1)
    k = F.normalize(torch.randn(b, t, h, dk, generator=gen), dim=-1)
    v = torch.randn(b, t, h, dv, generator=gen)
    z = torch.randn(b, t, h, dk, generator=gen) * 3
    a_log = torch.randn(h, generator=gen) * 0.5
    dt_bias = torch.randn(h * dk, generator=gen)
    g = kda_lowerbound_gate(z, a_log, dt_bias, -5.0)
    beta = torch.rand(b, t, h, generator=gen)
    s0 = torch.randn(b, h, dk, dv, generator=gen) if state else None
    return q, k, v, g, beta, s0


@pytest.mark.parametrize("t", [1, 17, 64, 100], ids=lambda t: f"T{t}")
@pytest.mark.parametrize("chunk", [16, 32, 64], ids=lambda c: f"C{c}")
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "init_state"])
def test_chunk_equals_recurrent(t: int, chunk: int, with_state: bool) -> None:
    q, k, v, g, beta, s0 = _inputs(2, t, 3, 32, 24, state=with_state)
    o_r, s_r = recurrent_kda(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    o_c, s_c = chunk_kda(
        q, k, v, g, beta, initial_state=s0, output_final_state=True, chunk_size=chunk
    )
    assert_close("o", o_r, o_c, 1e-5)
    assert_close("final_state", s_r, s_c, 1e-5)
    assert (o_r - o_c).abs().max() <= 1e-5


def test_recurrent_equals_token_loop_reference() -> None:
    q, k, v, g, beta, s0 = _inputs(1, 9, 2, 8, 6, seed=3)
    o_ref, s_ref = naive_recurrent_kda(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    o, s = recurrent_kda(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    assert_close("o", o_ref, o, 1e-6)
    assert_close("final_state", s_ref, s, 1e-6)


@pytest.mark.parametrize("split", [1, 15, 33], ids=lambda s: f"split{s}")
def test_chunked_resume_from_state(split: int) -> None:
    """Prefill in two chunks, carrying the state, = one prefill (what chunked prefill does)."""
    q, k, v, g, beta, _ = _inputs(1, 48, 2, 16, 16, seed=5, state=False)
    o_all, s_all = chunk_kda(q, k, v, g, beta, output_final_state=True)
    a = slice(0, split)
    b = slice(split, None)
    o1, s1 = chunk_kda(q[:, a], k[:, a], v[:, a], g[:, a], beta[:, a], output_final_state=True)
    o2, s2 = chunk_kda(
        q[:, b], k[:, b], v[:, b], g[:, b], beta[:, b], initial_state=s1, output_final_state=True
    )
    assert_close("o", o_all, torch.cat((o1, o2), dim=1), 1e-5)
    assert_close("final_state", s_all, s2, 1e-5)


def test_gate_is_lower_bounded_and_matches_reference() -> None:
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(4, 7, 3, 8, generator=gen) * 50  # extreme logits
    a_log, dt_bias = torch.randn(3, generator=gen), torch.randn(24, generator=gen)
    g = kda_lowerbound_gate(z, a_log, dt_bias, -5.0)
    assert (g >= -5.0).all() and (g <= 0).all()
    assert_close("g", naive_kda_lowerbound_gate(z, a_log, dt_bias, -5.0), g, 1e-6)


def test_bad_chunk_size_is_rejected() -> None:
    q, k, v, g, beta, _ = _inputs(1, 4, 1, 8, 8, state=False)
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_kda(q, k, v, g, beta, chunk_size=0)


@pytest.mark.parametrize("t", [13, 64], ids=lambda t: f"T{t}")
def test_matches_fla_naive_reference(t: int) -> None:
    """Gate and recurrence against fla's ``naive_kda_lowerbound_gate`` + ``naive_recurrent_kda``."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.ops.kda.gate import naive_kda_lowerbound_gate as fla_gate
        from fla.ops.kda.naive import naive_recurrent_kda as fla_recurrent

    gen = torch.Generator().manual_seed(7)
    b, h, dk, dv = 2, 4, 32, 32
    q = F.normalize(torch.randn(b, t, h, dk, generator=gen), dim=-1)
    k = F.normalize(torch.randn(b, t, h, dk, generator=gen), dim=-1)
    v = torch.randn(b, t, h, dv, generator=gen)
    z = torch.randn(b, t, h, dk, generator=gen) * 2
    a_log = torch.randn(h, generator=gen) * 0.3
    dt_bias = torch.randn(h * dk, generator=gen)
    beta = torch.rand(b, t, h, generator=gen)
    s0 = torch.randn(b, h, dk, dv, generator=gen)

    g_fla = fla_gate(z, a_log, dt_bias, lower_bound=-5.0)
    g = kda_lowerbound_gate(z, a_log, dt_bias, -5.0)
    assert_close("g", g_fla, g, 1e-6)
    o_fla, s_fla = fla_recurrent(q, k, v, g_fla, beta, initial_state=s0, output_final_state=True)
    o_c, s_c = chunk_kda(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    o_r, s_r = recurrent_kda(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    assert_close("o(chunk)", o_fla, o_c, 1e-5)
    assert_close("state(chunk)", s_fla, s_c, 1e-5)
    assert_close("o(recurrent)", o_fla, o_r, 1e-5)
    assert_close("state(recurrent)", s_fla, s_r, 1e-5)


def test_layer_prefill_then_decode_equals_full_sequence() -> None:
    """The layer continues its conv windows and state: prefill 11 + 5 decodes = 16 at once."""
    cfg = K3Config.preset("tiny")
    torch.manual_seed(0)
    layer = KimiDeltaAttention(cfg)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) / max(1, p.shape[-1]) ** 0.5)
        x = torch.randn(2, 16, cfg.hidden_size)
        y_full, _, s_full = layer(x)
        y, conv, s = layer(x[:, :11])
        outs = [y]
        for i in range(11, 16):
            y, conv, s = layer(x[:, i : i + 1], conv, s, mode="recurrent")
            outs.append(y)
    assert_close("y", y_full, torch.cat(outs, dim=1), 1e-5)
    assert_close("state", s_full, s, 1e-5)
