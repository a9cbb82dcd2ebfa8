"""KDA checkpoints live in right-sized slab slots, not pool pages (issue 26).

Before the slab a checkpoint took one pool page per KDA group (1.1 MiB on ``tiny-micro`` for
31 KiB of state), so checkpoints crowded MLA pages out of the pool. Tiny preset, 64-token pages,
32-token hash blocks, as in test_prefix_cache.py.
"""

from __future__ import annotations

import pytest

from tests.model.test_prefix_cache import TURN_END, make, slot_bytes, tokens


@pytest.fixture(scope="module")
def model():
    from services.model.arch import K3Config, K3ForCausalLM

    return K3ForCausalLM(K3Config.preset("tiny")).init_weights(0).eval()


def cache_pages(cache) -> int:
    return len(cache._page_keys)


def test_a_checkpoint_costs_one_slot_and_no_pool_page(model):
    eng = make(model)
    cache, pool = eng.prefix_cache, eng.runner.pools
    assert cache.slab.slot_bytes == slot_bytes(pool) == pool.state_bytes
    free_slots = cache.slab.num_free
    eng.generate(tokens(40, 40), 1)  # one hash block: one checkpoint, one MLA page
    assert cache.num_checkpoints == 1 and cache.slab.num_free == free_slots - 1
    assert pool.num_pages - pool.num_free_pages == cache_pages(cache) == 1
    cache.check_invariants()


def test_as_many_checkpoints_as_the_pool_has_pages(model):
    """One checkpoint per session for as many sessions as the pool has MLA pages (all 20 here:
    a request's KDA state is in a slot, not a page); with a page per KDA group (6) per
    checkpoint they would need 120 pages."""
    eng = make(model, max_tokens=20 * 64, spare_pages=0, slab_slots=64)
    cache, pool = eng.prefix_cache, eng.runner.pools
    prompts = [tokens(40, 100 + i) for i in range(30)]
    for p in prompts:
        eng.generate(p, 1)
    assert cache.num_checkpoints == pool.num_pages == cache_pages(cache) == 20
    assert all(cache.lookup(p + [1])[0] == 32 for p in prompts[-3:])  # pages still there
    cache.check_invariants()


def test_a_full_slab_evicts_checkpoints_lru_and_frees_their_slots(model):
    eng = make(model, slab_slots=2)
    cache = eng.prefix_cache
    prompts = [tokens(40, 200 + i) for i in range(4)]
    for p in prompts:
        eng.generate(p, 1)
    assert cache.num_checkpoints == 2 and cache.slab.num_free == 0
    assert cache.stats.evicted_checkpoints == 2
    assert [cache.lookup(p + [1])[0] for p in prompts] == [0, 0, 32, 32]  # oldest went first
    assert eng.generate(prompts[3] + [5, 6], 1).cached_tokens == 32
    cache.check_invariants()


def test_retained_turn_checkpoints_outlive_intermediate_ones(model):
    eng = make(model, slab_slots=2)
    cache = eng.prefix_cache
    system = tokens(70, 41) + [TURN_END]  # a retained checkpoint at 64
    eng.generate(system + tokens(60, 42), 1)  # plus an intermediate one at 128
    eng.generate(tokens(40, 43), 1)  # another session's state needs a slot
    assert cache.lookup(system + tokens(5, 44))[0] == 64
    cache.check_invariants()


def test_evicting_an_mla_page_frees_the_slots_it_made_reachable(model):
    eng = make(model)
    cache, pool = eng.prefix_cache, eng.runner.pools
    prompt = tokens(100, 45)  # checkpoints at 64 and 96, both reached through page 0
    eng.generate(prompt, 1)
    held = cache.num_checkpoints
    assert held >= 1
    assert cache.evict(pool.num_pages) >= 1  # everything the cache holds alone
    assert cache.num_checkpoints == 0 and cache.slab.num_free == cache.slab.num_slots
    assert cache.stats.evicted_checkpoints == held
    cache.check_invariants()


def test_no_slot_or_page_leaks_after_aborted_requests(model):
    eng = make(model, slab_slots=3, budget=32)
    cache, pool = eng.prefix_cache, eng.runner.pools
    reqs = [eng.submit(f"r{i}", tokens(200, 300 + i), 4) for i in range(3)]
    for _ in range(4):  # part-way through their prefills, checkpoints taken
        eng.step()
    assert cache.stats.checkpoints_taken >= 1
    for r in reqs:
        eng.scheduler.finish(r)  # what an abort does
    cache.check_invariants()
    assert pool.num_pages - pool.num_free_pages == cache_pages(cache)  # no request pages left
    cache.evict(pool.num_pages)
    cache.evict_checkpoints(cache.slab.num_slots)
    assert pool.num_free_pages == pool.num_pages
    assert cache.slab.num_free == cache.slab.num_slots and cache.num_checkpoints == 0
    cache.check_invariants()
