"""No request can hurt the model server: size limits, bad text, disconnects, saturation.

All against real uvicorn servers (reference engine, tiny preset, random weights). Generation that
must outlast a step of the test is kept alive with ``logit_bias`` pushing the stop tokens down, so
nothing here depends on how fast the machine is: every wait is on a condition, with a deadline.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from services.model.app import create_app
from services.model.tokenizer import END_OF_MSG
from tests.model.conftest import model_settings, running


def _engine(url: str) -> dict:
    engine = httpx.get(url + "/health", timeout=30).json()["checks"]["engine"]
    assert "error" not in engine, engine
    return engine


def _wait(cond: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _no_stop(tokenizer) -> dict[str, float]:
    """logit_bias that keeps a random-weights model from ever stopping by itself."""
    ids = [tokenizer.special_id(END_OF_MSG), tokenizer.special_tokens.get("[EOS]")]
    return {str(i): -100.0 for i in ids if i is not None}


def _post_json(url: str, path: str, body: dict) -> httpx.Response:
    # json.dumps escapes lone surrogates ("\ud800") as JSON allows; httpx's json= cannot send them.
    return httpx.post(
        url + path,
        content=json.dumps(body),
        headers={"content-type": "application/json"},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/v1/completions", {"prompt": "ab\ud800", "max_tokens": 2}, "prompt: lone surrogate"),
        ("/v1/tokenize", {"prompt": "\ud800"}, "prompt: lone surrogate U+D800 at character 0"),
        (
            "/v1/tokenize",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
            "messages[0].content[0].text: lone surrogate U+DFFF",
        ),
        ("/v1/completions", {"prompt": "x", "max_tokens": 2, "seed": 2**70}, "seed"),
    ],
    ids=["completion", "tokenize-prompt", "tokenize-messages", "seed"],
)
def test_bad_input_is_a_400_in_openai_envelope(model_server, path, body, where):
    r = _post_json(model_server.url, path, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert where in err["message"] and err["type"] == "invalid_request_error"


def test_unknown_fields_are_named_and_reasoning_effort_medium_is_accepted(model_server):
    c = openai.OpenAI(base_url=model_server.url + "/v1", api_key="x", max_retries=0, timeout=60)
    with pytest.raises(openai.BadRequestError, match="unknown field 'best_of'"):
        c.completions.create(model="k3-tiny", prompt="x", max_tokens=1, extra_body={"best_of": 2})
    done = c.chat.completions.create(
        model="k3-tiny",
        messages=[{"role": "user", "content": "hi"}],
        reasoning_effort="medium",
        max_tokens=2,
    )
    assert done.choices[0].finish_reason in ("stop", "length")


def test_oversized_bodies_get_413_and_health_stays_responsive(model_server):
    big = json.dumps({"prompt": "x" * (10 * 1024 * 1024), "max_tokens": 1}).encode()
    # Declared length: refused before a byte of the body is read.
    r = httpx.post(
        model_server.url + "/v1/completions",
        content=big,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 413 and "limit of 8388608 bytes" in r.json()["error"]["message"]

    # Chunked (no length): counted as it arrives, /health answering meanwhile.
    sent_half = threading.Event()
    health: list[int] = []

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(big), 1 << 20):
            if i >= len(big) // 2:
                sent_half.set()
            yield big[i : i + (1 << 20)]

    def check_health() -> None:
        sent_half.wait(60)
        health.append(httpx.get(model_server.url + "/health", timeout=5).status_code)

    checker = threading.Thread(target=check_health)
    checker.start()
    try:
        r = httpx.post(
            model_server.url + "/v1/completions",
            content=chunks(),
            headers={"content-type": "application/json"},
            timeout=60,
        )
        status = r.status_code
    except httpx.HTTPError:  # the server may close the connection while the client still sends
        status = 413
    checker.join(60)
    assert status == 413
    assert health == [200]


def test_prompt_longer_than_any_context_is_refused_before_tokenising(model_server):
    # 4 MiB: under the body limit, over max_model_len (2048) x the longest token's bytes.
    r = _post_json(model_server.url, "/v1/tokenize", {"prompt": "ab " * ((4 << 20) // 3)})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and "UTF-8 bytes" in err["message"]
    r = _post_json(
        model_server.url,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "ab " * ((4 << 20) // 3)}], "max_tokens": 1},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_a_disconnected_non_streaming_request_stops_decoding(model_server, tokenizer):
    before = _engine(model_server.url)
    body = json.dumps(
        {"prompt": "Once", "max_tokens": 2000, "logit_bias": _no_stop(tokenizer)}
    ).encode()
    sock = socket.create_connection(("127.0.0.1", model_server.port))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    _wait(lambda: _engine(model_server.url)["running"] >= 1, "the request to run")
    sock.close()
    _wait(lambda: _engine(model_server.url)["running"] == 0, "the running count to drop")
    after = _engine(model_server.url)
    assert after["aborted"] == before["aborted"] + 1
    assert after["generated_tokens"] - before["generated_tokens"] < 2000


def test_a_saturated_engine_answers_429_with_retry_after(tokenizer):
    app = create_app(model_settings(max_num_seqs=1, max_queued_requests=1))
    with running(app) as server:
        c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)
        keep = {"max_tokens": 1500, "extra_body": {"logit_bias": _no_stop(tokenizer)}}
        # Three choices where two fit: refused whole, the two already submitted are aborted.
        r = httpx.post(
            server.url + "/v1/completions",
            json={"prompt": "n", "n": 3, "stream": True, "max_tokens": 1500},
            timeout=60,
        )
        assert r.status_code == 429, r.text
        _wait(lambda: _engine(server.url)["aborted"] == 2, "the admitted choices to be aborted")
        assert _engine(server.url)["running"] + _engine(server.url)["waiting"] == 0
        first = c.completions.create(model="k3-tiny", prompt="a", stream=True, **keep)
        second = c.completions.create(model="k3-tiny", prompt="b", stream=True, **keep)
        try:
            _wait(lambda: _engine(server.url)["waiting"] == 1, "one running, one queued")
            r = httpx.post(server.url + "/v1/completions", json={"prompt": "c", "max_tokens": 1})
            assert r.status_code == 429, r.text
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "engine_saturated"
        finally:
            first.close()
            second.close()
        _wait(lambda: _engine(server.url)["running"] == 0, "the streams to be aborted")
        done = c.completions.create(model="k3-tiny", prompt="c", max_tokens=1)
        assert done.choices[0].finish_reason in ("stop", "length")
