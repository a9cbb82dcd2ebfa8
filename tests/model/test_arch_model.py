"""The whole model: ragged stateful steps = stateless forward; config and parameter counts."""

from __future__ import annotations

import pytest
import torch

from services.model.arch import K3Config, K3ForCausalLM, PoolExhausted, StatePools
from services.model.arch.testing import assert_close

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny() -> K3ForCausalLM:
    return K3ForCausalLM(K3Config.preset("tiny")).init_weights(0).eval()


# Per step, tokens fed to each of three requests (0 = idle this step): prefill chunks of
# different lengths and one-token decodes mixed in the same step.
SCHEDULES = {
    "prefill_then_decode": [(12, 5, 0), (1, 7, 9), (1, 1, 1), (1, 1, 1), (6, 1, 1)],
    "all_decode": [(1, 1, 1)] * 6,
    "chunked_prefill": [(20, 3, 17), (19, 30, 2), (1, 1, 1)],
}


@pytest.mark.parametrize("schedule", list(SCHEDULES), ids=list(SCHEDULES))
def test_forward_ragged_equals_stateless_forward(tiny: K3ForCausalLM, schedule: str) -> None:
    steps = SCHEDULES[schedule]
    lengths = [sum(s[r] for s in steps) for r in range(3)]
    gen = torch.Generator().manual_seed(11)
    seqs = [torch.randint(0, 2048, (n,), generator=gen) for n in lengths]
    pools = StatePools(tiny.config, max_requests=4, max_tokens=256, block_size=8)
    states = [pools.allocate() for _ in range(3)]
    got: list[list[torch.Tensor]] = [[], [], []]
    pos = [0, 0, 0]
    with torch.no_grad():
        for step in steps:
            active = [r for r in range(3) if step[r]]
            toks = [seqs[r][pos[r] : pos[r] + step[r]] for r in active]
            outs = tiny.forward_ragged(toks, [states[r] for r in active], pools)
            for r, o in zip(active, outs, strict=True):
                assert o.shape == (step[r], 2048)
                got[r].append(o)
                pos[r] += step[r]
        for r in range(3):
            assert states[r].num_tokens == lengths[r]
            ref = tiny(seqs[r][None])[0]
            assert_close(f"logits[{r}]", ref, torch.cat(got[r]), 1e-4)
    pools.check_invariants()


def test_forward_ragged_last_only(tiny: K3ForCausalLM) -> None:
    pools = StatePools(tiny.config, 2, 64)
    a, b = pools.allocate(), pools.allocate()
    ids = torch.arange(10)
    with torch.no_grad():
        ref = tiny(ids[None])[0]
        outs = tiny.forward_ragged([ids[:7], ids[:3]], [a, b], pools, last_only=True)
    assert outs[0].shape == (1, 2048)
    assert_close("last", ref[6:7], outs[0], 1e-4)
    assert_close("last", ref[2:3], outs[1], 1e-4)


def test_fork_continues_independently(tiny: K3ForCausalLM) -> None:
    """Fork after a shared prefix; each branch then equals its own full sequence."""
    pools = StatePools(tiny.config, 3, 128, block_size=8)
    prefix, tail_a, tail_b = torch.arange(0, 13), torch.arange(100, 104), torch.arange(200, 203)
    with torch.no_grad():
        s = pools.allocate()
        tiny.forward_ragged([prefix], [s], pools)
        f = pools.fork(s)
        out_a = tiny.forward_ragged([tail_a], [s], pools)[0]
        out_b = tiny.forward_ragged([tail_b], [f], pools)[0]
        ref_a = tiny(torch.cat((prefix, tail_a))[None])[0, 13:]
        ref_b = tiny(torch.cat((prefix, tail_b))[None])[0, 13:]
    assert_close("branch a", ref_a, out_a, 1e-4)
    assert_close("branch b", ref_b, out_b, 1e-4)
    pools.check_invariants()


def test_forward_ragged_pool_exhausted_changes_nothing(tiny: K3ForCausalLM) -> None:
    pools = StatePools(tiny.config, 2, 16, block_size=8)  # 2 blocks in all
    a, b = pools.allocate(), pools.allocate()
    with torch.no_grad():
        tiny.forward_ragged([torch.arange(5)], [a], pools)
        free = pools.num_free_blocks
        kda = pools.kda_state.clone()
        with pytest.raises(PoolExhausted, match="MLA blocks"):
            tiny.forward_ragged([torch.arange(2), torch.arange(9)], [a, b], pools)
    assert (a.num_tokens, b.num_tokens) == (5, 0)
    assert pools.num_free_blocks == free and a.block_table == [a.block_table[0]]
    assert torch.equal(kda, pools.kda_state)
    pools.check_invariants()


def test_forward_ragged_rejects_bad_input(tiny: K3ForCausalLM) -> None:
    pools = StatePools(tiny.config, 2, 32)
    a = pools.allocate()
    with pytest.raises(ValueError, match="token lists"):
        tiny.forward_ragged([torch.arange(2)], [], pools)
    with pytest.raises(ValueError, match="at least one"):
        tiny.forward_ragged([torch.arange(0)], [a], pools)
    with pytest.raises(ValueError, match="twice"):
        tiny.forward_ragged([torch.arange(1), torch.arange(1)], [a, a], pools)


# ----- config -------------------------------------------------------------------------------
def test_k3_parameter_counts_match_the_report() -> None:
    total, active = K3Config.preset("k3").parameter_count()
    assert abs(total / 2.78e12 - 1) < 0.01, total
    assert abs(active / 104.2e9 - 1) < 0.01, active


def test_k3_is_never_allocated_by_accident() -> None:
    with pytest.raises(ValueError, match="2,779.5B parameters"):
        K3ForCausalLM(K3Config.preset("k3"))


@pytest.mark.parametrize("name", ["tiny", "tiny-moe", "small"])
def test_parameter_count_matches_the_built_model(name: str) -> None:
    cfg = K3Config.preset(name)
    model = K3ForCausalLM(cfg)
    n = sum(p.numel() for p in model.parameters())
    n += sum(b.numel() for k, b in model.named_buffers() if k.endswith("e_score_correction_bias"))
    for layer in model.model.layers:  # MXFP4 buffers hold 2 elements per byte
        if layer.is_moe and cfg.experts_mxfp4:
            ex = layer.block_sparse_moe.experts
            n += 2 * (ex.w13_packed.numel() + ex.w2_packed.numel())
    assert cfg.parameter_count()[0] == n


def test_tiny_preset_structure() -> None:
    cfg = K3Config.preset("tiny")
    assert cfg.vocab_size == 2048
    assert len(cfg.kda_layer_ids) == 3 * len(cfg.mla_layer_ids)
    assert cfg.num_attn_res_blocks >= 2
    assert cfg.num_experts >= 16 and cfg.num_experts_per_token == 4
    assert cfg.num_shared_experts == 2 and cfg.routed_width == cfg.hidden_size // 2
    assert not cfg.is_moe_layer(0) and cfg.is_moe_layer(1)


def test_unknown_preset_lists_choices() -> None:
    with pytest.raises(ValueError, match=r"tiny.*|k3"):
        K3Config.preset("nope")


def test_config_round_trips_through_config_json_shape() -> None:
    cfg = K3Config.preset("k3")
    wrapped = {"model_type": "kimi_k3", "text_config": cfg.to_dict()}
    again = K3Config.from_dict(wrapped)
    assert again == cfg
    raw = {
        k: v
        for k, v in cfg.to_dict().items()
        if k not in ("num_experts_per_token", "num_shared_experts")
    }
    alias = K3Config.from_dict({**raw, "num_experts_per_tok": 8, "n_shared_experts": 1})
    assert (alias.num_experts_per_token, alias.num_shared_experts) == (8, 1)
    with pytest.raises(ValueError, match="exactly once"):
        K3Config.from_dict({**cfg.to_dict(), "num_hidden_layers": 94})
