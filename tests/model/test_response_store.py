"""The Responses store through the stock ``openai`` client: ``previous_response_id`` continues a
stored response (the model sees the earlier turn), ``retrieve`` and ``delete`` work, and
``store: false`` keeps nothing."""

from __future__ import annotations

import time

import openai
import pytest
from openai import OpenAI

from services.model.serving.response_store import ResponseStore


def client(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_previous_response_id_round_trip(model_server):
    c = client(model_server.url)
    first = c.responses.create(
        model="k3-tiny", input="Remember the word teal.", max_output_tokens=8
    )
    again = c.responses.retrieve(first.id)
    assert again.id == first.id and again.output_text == first.output_text
    follow = c.responses.create(
        model="k3-tiny", input="Which word?", previous_response_id=first.id, max_output_tokens=8
    )
    alone = c.responses.create(model="k3-tiny", input="Which word?", max_output_tokens=8)
    # The follow-up's prompt holds the first turn, so it is longer than the same question alone.
    assert follow.usage.input_tokens > alone.usage.input_tokens + 5
    streamed = c.responses.create(
        model="k3-tiny", input="And now?", previous_response_id=follow.id, max_output_tokens=4,
        stream=True,
    )  # fmt: skip
    done = [e for e in streamed if e.type in ("response.completed", "response.incomplete")]
    assert c.responses.retrieve(done[0].response.id).id == done[0].response.id
    c.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(first.id)


def test_store_false_keeps_nothing(model_server):
    c = client(model_server.url)
    resp = c.responses.create(model="k3-tiny", input="hi", store=False, max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(resp.id)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        c.responses.create(model="k3-tiny", input="x", previous_response_id=resp.id)


def test_the_store_is_bounded_in_number_and_age(tmp_path):
    store = ResponseStore(f"sqlite:///{tmp_path / 'r.db'}", max_items=3, ttl_s=0.5)
    for i in range(5):
        store.put({"id": f"resp-{i}", "output": []}, [])
    assert [store.get(f"resp-{i}") is not None for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    time.sleep(0.6)
    assert store.get("resp-4") is None
    store.close()
