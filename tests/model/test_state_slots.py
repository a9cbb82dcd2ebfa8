"""Each running request's KDA state lives in a slot sized to the state, beside the pool, whose
pages are left to MLA KV (issue 38): a state used to take a whole pool page (3.75 MiB on ``tiny``
at 6144-token pages for 122 KiB of state, 16 of the default pool's 22 pages).

Tiny preset; 64-token pages unless a test is about the service's defaults.
"""

from __future__ import annotations

import httpx
import pytest
import torch

from services.model.arch import K3Config, K3ForCausalLM
from services.model.arch.state import StatePools
from services.model.serving.offline import OfflineEngine
from services.model.serving.pool import PagedPool
from services.model.serving.runner import K3Runner
from tests.model.conftest import model_settings, running
from tests.model.test_prefix_cache import tokens


@pytest.fixture(scope="module")
def model() -> K3ForCausalLM:
    return K3ForCausalLM(K3Config.preset("tiny")).init_weights(0).eval()


def paged(model, *, pages: int = 16, slots: int = 4, in_pages: bool = False) -> PagedPool:
    return PagedPool(
        model.config, pages + (slots if in_pages else 0), max_requests=slots, page_tokens=64,
        state_in_pages=in_pages,
    )  # fmt: skip


def engine(model, pools) -> OfflineEngine:
    return OfflineEngine(K3Runner(model, pools), max_num_seqs=4, max_num_batched_tokens=96)


def test_a_requests_state_takes_a_slot_and_no_page(model):
    pool = paged(model)
    assert pool.state_raw.shape == (4, pool.state_bytes)  # a slot is exactly one state
    st = pool.allocate()
    assert pool.num_live == 1 and pool.num_used_pages == 0
    pool.reserve(st, 100)  # 100 tokens of KV: two 64-token pages, and nothing else
    assert pool.num_used_pages == 2 == len(st.block_table)
    pool.free(st)
    assert pool.num_live == 0 and pool.num_used_pages == 0
    pool.check_invariants()


def test_n_concurrent_requests_hold_n_slots_and_only_their_kv_pages(model):
    eng = engine(model, paged(model))
    reqs = [eng.submit(f"r{i}", tokens(40 + 30 * i, i), 8) for i in range(3)]
    for _ in range(3):
        eng.step()
    running = [r for r in reqs if r.state is not None]
    assert len(running) == 3
    readings = eng.runner.memory_readings
    assert readings["state_slots"] == 4 and readings["state_slots_used"] == 3
    kv_pages = sum(len(r.state.block_table) for r in running)
    assert (
        readings["pool_pages_used"]
        == kv_pages
        == sum(-(-r.state.num_tokens // 64) for r in running)
    )
    eng.run()
    assert eng.runner.memory_readings["state_slots_used"] == 0
    assert eng.runner.memory_readings["pool_pages_used"] == 0


def test_the_longest_request_is_the_whole_pool_and_finishes_beside_full_slots(model):
    pool = paged(model, pages=5, slots=4)
    assert pool.max_tokens == 5 * 64  # no page is held back for states any more
    states = [pool.allocate() for _ in range(4)]  # every slot taken
    pool.reserve(states[0], pool.max_tokens)
    assert len(states[0].block_table) == 5
    old = paged(model, pages=5, slots=4, in_pages=True)
    assert old.max_tokens == 5 * 64 and old.num_pages == 9  # the old layout needed 4 more pages


def test_outputs_are_token_for_token_those_of_the_old_layout_and_the_reference_pools(model):
    """Concurrent greedy requests of mixed lengths through the slot layout, the old layout
    (states in pages) and the unpaged reference pools (:class:`StatePools`)."""
    prompts = [tokens(n, 50 + n) for n in (7, 70, 150)]

    def run(pools):  # type: ignore[no-untyped-def]
        eng = engine(model, pools)
        for i, p in enumerate(prompts):
            eng.submit(str(i), p, 12)
        return {r.request_id: r for r in eng.run()}

    slots = run(paged(model))
    pages = run(paged(model, in_pages=True))
    reference = run(StatePools(model.config, 4, 1024))
    for i in map(str, range(len(prompts))):
        assert slots[i].output_ids == pages[i].output_ids == reference[i].output_ids
        for a, b, c in zip(slots[i].logits, pages[i].logits, reference[i].logits, strict=True):
            assert torch.equal(a, b)  # the same arithmetic on the same state bytes
            assert (a - c).abs().max().item() <= 1e-5


def test_metrics_show_pages_and_slots_and_a_request_longer_than_the_pool_is_refused():
    from services.model.app import create_app

    settings = model_settings(
        page_tokens=64, hash_block_tokens=32, max_pool_tokens=256, max_model_len=2048
    )
    with running(create_app(settings)) as server:
        url = server.url
        (card,) = httpx.get(url + "/v1/models", timeout=30).json()["data"]
        assert card["max_model_len"] == 256  # the pool's 4 pages, not the setting
        long = httpx.post(
            url + "/v1/completions",
            json={"model": "k3-tiny", "prompt": "word " * 400, "max_tokens": 1},
            timeout=60,
        )
        assert long.status_code == 400, long.text
        error = long.json()["error"]
        assert error["code"] == "context_length_exceeded" and "256" in error["message"]
        ok = httpx.post(
            url + "/v1/completions",
            json={"model": "k3-tiny", "prompt": "hello there " * 20, "max_tokens": 2},
            timeout=60,
        )
        assert ok.status_code == 200, ok.text
        text = httpx.get(url + "/metrics", timeout=30).text
    readings = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("k3stack_model_engine_")
    }
    assert readings["k3stack_model_engine_pool_pages"] == 4
    assert readings["k3stack_model_engine_state_slots"] == 8  # max_num_seqs
    assert readings["k3stack_model_engine_state_slots_used"] == 0  # nothing running now
    assert readings["k3stack_model_engine_pool_pages_used"] >= 1  # the prompt's cached page
    assert readings["k3stack_model_engine_prefix_cache_checkpoint_slots"] == 4 * 2  # reach
