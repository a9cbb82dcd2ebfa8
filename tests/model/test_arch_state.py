"""StatePools: allocation, exhaustion, free, fork with copy-on-write blocks."""

from __future__ import annotations

import pytest
import torch

from services.model.arch import K3Config, PoolExhausted, StatePools


@pytest.fixture
def pools() -> StatePools:
    return StatePools(K3Config.preset("tiny"), max_requests=2, max_tokens=32, block_size=8)


def test_shapes_follow_the_config(pools: StatePools) -> None:
    cfg = pools.config
    la = cfg.linear_attn_config
    assert pools.kda_state.shape == (2, 6, la.num_heads, la.head_dim, la.head_dim)
    assert pools.kda_state.dtype == torch.float32
    assert pools.conv_state.shape == (2, 6, la.short_conv_kernel_size - 1, 3 * cfg.kda_dim)
    assert pools.mla_kv.shape == (4, 2, 8, cfg.kv_lora_rank + cfg.qk_rope_head_dim)


def test_slots_exhaust_and_free(pools: StatePools) -> None:
    a, b = pools.allocate(), pools.allocate()
    assert pools.num_free_slots == 0 and a.slot != b.slot
    with pytest.raises(PoolExhausted, match="slots"):
        pools.allocate()
    pools.free(a)
    pools.free(a)  # idempotent
    assert pools.num_free_slots == 1
    c = pools.allocate()
    assert c.slot == a.slot and not c.freed


def test_blocks_exhaust_atomically(pools: StatePools) -> None:
    a = pools.allocate()
    assert pools.reserve(a, 20) == a.block_table and len(a.block_table) == 3
    a.num_tokens = 20  # what the model does after the step
    with pytest.raises(PoolExhausted, match="MLA blocks"):
        pools.reserve(a, 20)  # needs 2 more blocks (20 + 20 = 40 > 32), 1 free
    assert len(a.block_table) == 3 and pools.num_free_blocks == 1
    pools.free(a)
    assert pools.num_free_blocks == 4
    pools.check_invariants()


def test_allocate_zeroes_a_reused_slot(pools: StatePools) -> None:
    a = pools.allocate()
    pools.kda_state[a.slot].fill_(3.0)
    pools.conv_state[a.slot].fill_(3.0)
    pools.free(a)
    b = pools.allocate()
    assert pools.kda_state[b.slot].abs().sum() == 0 and pools.conv_state[b.slot].abs().sum() == 0


def test_fork_copies_state_and_shares_blocks_until_written(pools: StatePools) -> None:
    a = pools.allocate()
    pools.reserve(a, 12)  # blocks: one full, one partial (4 of 8 tokens)
    a.num_tokens = 12
    pools.kda_state[a.slot].normal_()
    pools.mla_kv[a.block_table[1]].fill_(7.0)
    f = pools.fork(a)
    assert f.slot != a.slot and f.block_table == a.block_table and f.num_tokens == 12
    assert torch.equal(pools.kda_state[f.slot], pools.kda_state[a.slot])
    free = pools.num_free_blocks
    pools.reserve(f, 1)  # the shared partial tail is copied before the fork writes into it
    assert f.block_table[0] == a.block_table[0] and f.block_table[1] != a.block_table[1]
    assert torch.equal(pools.mla_kv[f.block_table[1]], pools.mla_kv[a.block_table[1]])
    assert pools.num_free_blocks == free - 1
    pools.free(a)
    pools.check_invariants()
    assert pools.num_free_blocks == 2  # f keeps the shared first block and its own copy
    pools.free(f)
    assert pools.num_free_blocks == 4
    pools.check_invariants()


def test_fork_fails_cleanly_without_a_slot(pools: StatePools) -> None:
    a, _ = pools.allocate(), pools.allocate()
    pools.reserve(a, 8)
    with pytest.raises(PoolExhausted):
        pools.fork(a)
    pools.check_invariants()
