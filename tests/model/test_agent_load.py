"""No request stalls the others: huge bodies are refused cheaply (a count that stops past the
context, in a tokenising pool of its own) and a long prompt's prefill does not hold back a short
chat (admission classes, on by default). Bounds are generous; bench/agent_load.py has figures."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from services.model.serving.tokenize_pool import count_upto, pieces
from tests.model.conftest import running

JSON = {"content-type": "application/json"}
CHAT = {
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 1,
    "reasoning_effort": "none",
}


def test_count_upto_stops_past_the_limit_and_matches_when_under(tokenizer):
    text = "lorem ipsum dolor sit amet, " * 3000
    assert "".join(pieces(text, 1000)) == text
    exact = len(tokenizer.encode(text))
    counted = count_upto(tokenizer, [(text, False)], exact + 10)
    assert exact - 10 <= counted <= exact  # a lower bound: each cut is discounted
    assert count_upto(tokenizer, [(text, False)], 100) <= 100 + len(tokenizer.encode(text[:16500]))
    assert count_upto(tokenizer, [("x" * 64, False), ("[sep]", True)], 1000) > 0
    cancel = threading.Event()
    cancel.set()
    try:
        count_upto(tokenizer, [(text, False)], 10**9, cancel)
    except Exception as exc:  # noqa: BLE001 - the pool's Cancelled
        assert type(exc).__name__ == "Cancelled"
    else:
        raise AssertionError("a cancelled count kept going")


def test_a_short_chat_answers_while_six_2mib_bodies_are_refused(model_server):
    body = json.dumps({"messages": [{"role": "user", "content": "word " * (400 * 1024)}]})
    url = model_server.url + "/v1/chat/completions"
    with ThreadPoolExecutor(6) as pool:
        refused = [
            pool.submit(httpx.post, url, content=body, headers=JSON, timeout=240) for _ in range(6)
        ]
        started = time.monotonic()
        short = httpx.post(url, json=CHAT, timeout=240)
        took = time.monotonic() - started
        answers = [f.result() for f in refused]
    assert short.status_code == 200, short.text
    for r in answers:
        assert r.status_code == 400 and "context length" in r.json()["error"]["message"], r.text
    assert took < 60, took  # generous; 43.7 s before tokenising had a pool and a bound


def test_a_short_chat_is_not_held_behind_a_long_prefill():
    from services.model.app import create_app
    from tests.model.conftest import model_settings

    settings = model_settings(max_model_len=8192, max_pool_tokens=16384)
    assert settings.model.admission_classes  # on by default
    with running(create_app(settings)) as server:
        url = server.url + "/v1/chat/completions"
        long = {**CHAT, "messages": [{"role": "user", "content": "lorem ipsum dolor " * 700}]}
        done: dict[str, float] = {}

        def post(name: str, body: dict) -> httpx.Response:
            r = httpx.post(url, json=body, timeout=280)
            done[name] = time.monotonic()
            return r

        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(post, "long", long)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # wait until the long prompt is prefilling
                health = httpx.get(server.url + "/health", timeout=30).json()
                if health["checks"]["engine"]["running"]:
                    break
                time.sleep(0.05)
            fast = pool.submit(post, "short", CHAT)
            assert fast.result().status_code == 200 and slow.result().status_code == 200
    assert slow.result().json()["usage"]["prompt_tokens"] > 3000
    assert done["short"] < done["long"]  # it did not wait for the whole prefill
