"""The hybrid prefix cache over the one paged pool: the pool itself, the report's example,
turn-boundary retention, pinning, sibling invalidation, the step rule and admission classes.

Tiny preset, tiny pages (64 tokens, 32-token hash blocks: the smallest multiple of the KDA chunk)
unless a test is about the report's own sizes; every equivalence check compares against the same
scheduler with the cache off, with the default chunked KDA kernel, at 1e-5 on fp32 logits.
"""

from __future__ import annotations

import pytest
import torch

from services.model.arch import K3Config, K3ForCausalLM
from services.model.serving.checkpoint_slab import CheckpointSlab
from services.model.serving.hybrid_cache import HybridPrefixCache
from services.model.serving.offline import OfflineEngine
from services.model.serving.pool import PagedPool, PoolExhausted
from services.model.serving.runner import K3Runner

TURN_END = 7  # stands in for the template's end-of-message token in synthetic prompts


@pytest.fixture(scope="module")
def model() -> K3ForCausalLM:
    return K3ForCausalLM(K3Config.preset("tiny")).init_weights(0).eval()


def make(
    model: K3ForCausalLM,
    *,
    cache: bool = True,
    page_tokens: int = 64,
    hash_block: int = 32,
    max_tokens: int = 2048,
    max_requests: int = 4,
    spare_pages: int = 64,
    host_tier_bytes: int = 0,
    budget: int = 96,
    slab_slots: int | None = None,
) -> OfflineEngine:
    pool = PagedPool.for_tokens(
        model.config, max_tokens=max_tokens, max_requests=max_requests,
        page_tokens=page_tokens, spare_pages=spare_pages,
    )  # fmt: skip
    pc = None
    if cache:
        slab = {} if slab_slots is None else {"slab_bytes": slab_slots * slot_bytes(pool)}
        pc = HybridPrefixCache(
            pool, hash_block=hash_block, turn_end_ids=[TURN_END],
            host_tier_bytes=host_tier_bytes, **slab,
        )  # fmt: skip
    return OfflineEngine(
        K3Runner(model, pool), max_num_seqs=max_requests, max_num_batched_tokens=budget,
        prefix_cache=pc,
    )  # fmt: skip


def slot_bytes(pool: PagedPool) -> int:
    return CheckpointSlab(pool, 1).slot_bytes


def tokens(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [int(t) for t in torch.randint(10, 2000, (n,), generator=g)]


def test_pool_pages_share_one_byte_size_and_heads_are_contiguous(model):
    pool = PagedPool.for_tokens(model.config, max_tokens=256, max_requests=2, page_tokens=64)
    la = model.config.linear_attn_config
    assert pool.storage.shape[1] == pool.page_bytes >= pool.mla_bytes
    st = pool.allocate()
    conv = torch.randn(1, la.short_conv_kernel_size - 1, 3 * model.config.kda_dim)
    s = torch.randn(1, la.num_heads, la.head_dim, la.head_dim)
    pool.kda_write([st], 0, conv, s)
    conv2, s2 = pool.kda_read([st], 0)
    assert torch.equal(conv2, conv) and torch.equal(s2, s)
    # head 1's bytes are one contiguous run: its state then its conv window
    raw = pool.state_view[st.kda_slot, 0, 1]
    k = la.head_dim
    assert torch.equal(raw[: k * k], s[0, 1].reshape(-1))
    pool.free(st)
    pool.check_invariants()


def test_paged_forward_equals_stateless_forward(model):
    """Attention reads pages in place (several pages per request) and matches the reference."""
    ids = torch.tensor(tokens(150, 1))
    ref = model(ids[None])[0]
    pool = PagedPool.for_tokens(model.config, max_tokens=512, max_requests=2, page_tokens=32)
    st = pool.allocate()
    outs = []
    with torch.inference_mode():
        for a, b in [(0, 70), (70, 71), (71, 140), (140, 141), (141, 150)]:
            outs.append(model.forward_ragged([ids[a:b]], [st], pool)[0])
    assert len(st.block_table) == 5
    torch.testing.assert_close(torch.cat(outs), ref, atol=1e-4, rtol=1e-4)


def test_follow_up_turn_hits_and_equals_cache_off(model):
    prompt = tokens(100, 2)
    on, off = make(model), make(model, cache=False)
    first_on, first_off = on.generate(prompt, 4), off.generate(prompt, 4)
    assert first_on.output_ids == first_off.output_ids
    follow = prompt + first_on.output_ids + tokens(40, 3)
    a, b = on.generate(follow, 6), off.generate(follow, 6)
    assert a.cached_tokens == 96 and b.cached_tokens == 0  # last hash endpoint before 104
    assert a.computed_tokens == len(follow) - 96 + 5
    assert a.output_ids == b.output_ids
    for x, y in zip(a.logits, b.logits, strict=True):
        assert (x - y).abs().max().item() <= 1e-5
    on.prefix_cache.check_invariants()


def test_report_example_2800_shared_tokens_reuse_exactly_2560(model):
    """6144-token pages, 512-token hash blocks: a hit at B = 2560 deep inside a partial page."""
    cached = tokens(3000, 4)
    eng = make(model, page_tokens=6144, hash_block=512, max_tokens=8192, budget=4096, spare_pages=2)
    eng.generate(cached, 1)
    cache = eng.prefix_cache
    assert cache.lookup(cached + [1])[0] == 2560  # its state at 2560 was checkpointed
    probe = cached[:2800] + tokens(300, 5)
    hit, matched, pages, ck = cache.lookup(probe)
    assert (hit, matched, len(pages), ck.end) == (2560, 2560, 1, 2560)
    res = eng.generate(probe, 1)
    assert res.cached_tokens == 2560 and res.computed_tokens == len(probe) - 2560
    cache.check_invariants()


def test_unique_tokens_still_reuse_up_to_the_last_turn_boundary(model):
    """vLLM align mode keeps only the last boundary, in unique tokens; we keep the turn's."""
    system = tokens(70, 6) + [TURN_END]  # turn boundary at 71: its hash endpoint is 64
    a = system + tokens(60, 7)  # A's own last checkpoint lands in its unique tokens (128)
    eng = make(model)
    eng.generate(a, 1)
    b = system + tokens(50, 8)
    res = eng.generate(b, 1)
    assert res.cached_tokens == 64
    off = make(model, cache=False).generate(b, 1)
    assert (res.logits[0] - off.logits[0]).abs().max().item() <= 1e-5


def test_superseded_intermediate_checkpoints_are_recycled(model):
    eng = make(model, budget=32)  # a chunk per hash block: a checkpoint after each
    eng.generate(tokens(130, 9), 1)
    cache = eng.prefix_cache
    assert cache.stats.checkpoints_taken == 4
    assert cache.num_checkpoints == 1  # only the latest survives
    assert cache.checkpoint_bytes == cache.slab.slot_bytes  # one slot, not a page per group


def test_registered_this_step_is_not_matched_until_the_next(model):
    eng = make(model)
    prompt = tokens(50, 10)
    eng.generate(prompt, 1)
    cache = eng.prefix_cache
    probe = prompt + [3]
    assert cache.lookup(probe)[0] == 32
    # what the cache learned during the step now running is invisible to the same step
    cache.step -= 1
    assert cache.lookup(probe)[0] == 0
    cache.step += 1


def test_one_slot_holds_every_kda_group_and_evicting_it_frees_the_slot(model):
    eng = make(model)
    prompt = tokens(40, 11)
    eng.generate(prompt, 1)
    cache, pool = eng.prefix_cache, eng.runner.pools
    assert pool.state_bytes > pool.page_bytes  # more than a page: the old layout's groups
    assert cache.slab.slot_bytes == pool.n_kda * pool.layer_bytes  # every layer, right-sized
    (ck,) = cache._ckpts.values()
    free_pages, free_slots = pool.num_free_pages, cache.slab.num_free
    assert cache.evict_checkpoints(1) == 1
    assert cache.lookup(prompt + [1])[0] == 0 and cache.num_checkpoints == 0
    assert cache.slab.num_free == free_slots + 1 and pool.num_free_pages == free_pages
    cache.check_invariants()


def test_pinned_pages_are_never_evicted(model):
    """Pages a hit pinned survive an allocation that makes the cache evict everything it can,
    and their bytes are untouched while the freed pages are rewritten."""
    eng = make(model, spare_pages=0, max_tokens=256)
    cache, pool = eng.prefix_cache, eng.runner.pools
    prompt = tokens(120, 12)
    eng.generate(prompt, 1)
    eng.generate(tokens(120, 13), 1)  # a second, unpinned prefix the eviction may take
    st = pool.allocate()
    assert cache.match(prompt + [5], st) == 96
    held = list(st.block_table)
    before = pool.storage[held].clone()
    with pytest.raises(PoolExhausted):
        pool.take(pool.num_free_pages + 100)  # forces the cache to evict all it can
    assert cache.stats.evicted_pages + cache.stats.evicted_checkpoints > 0
    grabbed = pool.take(pool.num_free_pages)
    pool.storage[grabbed] = 255  # whoever gets the freed pages writes them
    assert all(pool.refs[p] >= 1 for p in held) and not set(held) & set(grabbed)
    assert torch.equal(pool.storage[held], before)
    for p in grabbed:
        pool.unref(p)
    pool.free(st)
    cache.check_invariants()


def conversation_tree(seed: int, nodes: int) -> list[tuple[int, list[int]]]:
    """(parent index or -1, new user tokens ending in a turn end) for a random tree."""
    g = torch.Generator().manual_seed(seed)
    out = [(-1, tokens(40, seed) + [TURN_END])]
    for i in range(1, nodes):
        parent = int(torch.randint(0, i, (1,), generator=g))
        n = int(torch.randint(5, 60, (1,), generator=g))
        out.append((parent, tokens(n, seed * 100 + i) + [TURN_END]))
    return out


def replay_tree(eng: OfflineEngine, tree, *, wave: int, max_tokens: int = 3):
    """Run the tree in rounds of up to ``wave`` concurrent requests whose parents are done;
    a child's prompt is its parent's prompt and answer, a turn end, then its own turn."""
    convo: dict[int, list[int]] = {}
    results = {}
    pending = list(range(len(tree)))
    while pending:
        ready = [i for i in pending if tree[i][0] == -1 or tree[i][0] in convo][:wave]
        prompts = {}
        for i in ready:
            parent, delta = tree[i]
            prompts[i] = (convo[parent] + [TURN_END] if parent >= 0 else []) + delta
            eng.submit(str(i), prompts[i], max_tokens)
            pending.remove(i)
        for res in eng.run():
            i = int(res.request_id)
            convo[i] = prompts[i] + res.output_ids
            results[i] = res
    return results


TREE_CASES = [
    ("roomy", dict()),
    ("evicting-pages", dict(spare_pages=0, max_tokens=256, max_requests=3)),
    ("evicting-slots", dict(slab_slots=2)),
    # 8 pages: what the old layout left to MLA while three of four requests held six state
    # pages each (KDA states are in slots now, so the pool is all KV)
    ("host-tier", dict(spare_pages=6, max_tokens=128, slab_slots=3, host_tier_bytes=1 << 26)),
]


def compare_trees(model, name, kw, nodes=10):
    tree = conversation_tree(13, nodes)
    on = make(model, **kw)
    got = replay_tree(on, tree, wave=3)
    want = replay_tree(make(model, cache=False, **kw), tree, wave=3)
    assert set(got) == set(want) == set(range(nodes))
    worst = 0.0
    for i in got:
        assert got[i].output_ids == want[i].output_ids, f"request {i}"
        for x, y in zip(got[i].logits, want[i].logits, strict=True):
            worst = max(worst, (x - y).abs().max().item())
    stats = on.prefix_cache.stats
    assert stats.hits >= 5 and stats.hit_tokens > 0
    reported = sum(r.cached_tokens for r in got.values())
    if stats.lookups == nodes:
        assert reported == stats.hit_tokens
    else:  # a preempted request looks up again when it resumes; its result reports the last
        assert stats.lookups > nodes and reported <= stats.hit_tokens
    assert any(r.cached_tokens % 64 for r in got.values())  # hits inside a partial page
    if name != "roomy":
        assert stats.evicted_checkpoints + stats.evicted_pages > 0
    if name == "host-tier":
        assert stats.host_hits > 0
    on.prefix_cache.check_invariants()
    return worst


@pytest.mark.parametrize("name, kw", TREE_CASES)
def test_random_conversation_trees_equal_cache_off(model, name, kw):
    assert compare_trees(model, name, kw) <= 1e-5


def test_a_hit_refreshes_only_what_it_used(model):
    """A hit at a turn boundary leaves the deeper checkpoint of the same chain least recently
    used, so it goes before another session's newer state (SGLang #31643 refreshed the chain)."""
    eng = make(model)
    cache = eng.prefix_cache
    system = tokens(70, 20) + [TURN_END]
    a = system + tokens(60, 21)
    eng.generate(a, 1)  # checkpoints at 64 (turn, retained) and 128 (its latest)
    b = tokens(100, 22)
    eng.generate(b, 1)  # another session: checkpoint at 96
    assert eng.generate(system + tokens(30, 23), 1).cached_tokens == 64
    cache.evict_checkpoints(1)  # room for one checkpoint
    assert cache.lookup(a + [1])[0] == 64  # a's unused deeper state went first
    assert cache.lookup(b + [1])[0] == 96
    cache.check_invariants()


def test_prefill_chunks_end_on_the_kda_chunk_grid_with_or_without_a_cache(model):
    """Decodes leave odd budgets (95 of 96 tokens); prefill still stops on multiples of 32, so
    a cache-on and a cache-off run split every prompt on the same grid."""
    for cache in (False, True):
        eng = make(model, cache=cache, budget=96)
        eng.submit("short", tokens(10, 30), 30)
        long = eng.submit("long", tokens(300, 31), 1)
        ends = []
        while eng.scheduler.has_work():
            eng.step()
            if long.num_computed and (not ends or ends[-1] != long.num_computed):
                ends.append(long.num_computed)
        assert ends[-1] == 300 and all(e % 32 == 0 for e in ends[:-1]), ends
        assert any(b - a < 96 for a, b in zip([0, *ends], ends[:-1], strict=False))


def test_hash_blocks_off_the_chunk_grid_are_refused(model):
    from services.model.arch import kda
    from shared.settings import KDA_PREFILL_CHUNK, ModelSettings

    assert KDA_PREFILL_CHUNK == kda.CHUNK_SIZE
    with pytest.raises(ValueError, match="multiple of the KDA prefill chunk"):
        make(model, hash_block=16)
    with pytest.raises(ValueError, match="multiple of the KDA prefill chunk"):
        ModelSettings(hash_block_tokens=48, page_tokens=96)
    with pytest.raises(ValueError, match="multiple of hash_block_tokens"):
        ModelSettings(hash_block_tokens=64, page_tokens=96)
    assert ModelSettings(hash_block_tokens=48, page_tokens=96, prefix_cache=False)
