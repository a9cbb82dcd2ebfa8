"""The longest request allowed is what the pool can hold beside every other request: with every
request slot taken, one request of ``max_tokens`` still gets all its pages (an older length
counted only its own KDA pages: 129,024 tokens in a 32,768-token pool, so an admitted request
could not finish beside others). KDA states are in slots beside the pool now, so that is every
page of it."""

from __future__ import annotations

import pytest

from services.model.arch.config import K3Config
from services.model.serving.pool import PagedPool


@pytest.mark.parametrize(
    ("max_tokens", "slots", "page"), [(4096, 8, 64), (1000, 3, 128), (32768, 16, 6144)]
)
def test_the_longest_request_fits_beside_every_other_slot(max_tokens, slots, page):
    pool = PagedPool.for_tokens(
        K3Config.preset("tiny"), max_tokens=max_tokens, max_requests=slots, page_tokens=page,
        device="meta",
    )  # fmt: skip
    assert max_tokens <= pool.max_tokens < max_tokens + page
    states = [pool.allocate() for _ in range(slots)]  # every request slot is taken
    pool.reserve(states[0], pool.max_tokens)
    assert states[0].num_tokens + len(states[0].block_table) * page >= pool.max_tokens
