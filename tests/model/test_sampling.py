"""Sampling options and the outputs RL stacks need: n, logprobs, token ids, through the official
``openai`` client on a real server (tiny preset, random weights), and the sampler's filters alone.
"""

from __future__ import annotations

import math

import httpx
import pytest
import torch
from openai import OpenAI

from services.model.serving.sampling import Sampler, SamplingParams, min_p_filter


def client(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _draws(params: SamplingParams, logits: torch.Tensor, n: int = 200) -> set[int]:
    sampler = Sampler(params, logits.numel())
    return {sampler.sample(logits) for _ in range(n)}


def test_top_k_keeps_only_the_k_most_likely():
    logits = torch.tensor([4.0, 3.9, 3.8, 0.0, -1.0, 3.7])
    assert _draws(SamplingParams(temperature=1.0, top_k=2, seed=0), logits) == {0, 1}


def test_min_p_drops_tokens_far_below_the_top():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    out = min_p_filter(probs, 0.2)  # keeps p >= 0.1
    assert out[3] == 0 and math.isclose(float(out.sum()), 1.0, rel_tol=1e-6)
    assert _draws(SamplingParams(min_p=0.2, seed=1), probs.log()) <= {0, 1, 2}


def test_logit_bias_forces_and_forbids_tokens():
    logits = torch.zeros(8)
    assert _draws(SamplingParams(seed=0, logit_bias={5: 100.0}), logits) == {5}
    banned = _draws(SamplingParams(seed=0, logit_bias={i: -100.0 for i in range(7)}), logits)
    assert banned == {7}


def test_repetition_penalty_covers_the_prompt():
    logits = torch.tensor([2.0, 1.9, 0.0])
    greedy = Sampler(SamplingParams(temperature=0, repetition_penalty=1.5), 3, prompt_ids=[0])
    assert greedy.sample(logits) == 1  # 2.0 / 1.5 < 1.9
    assert greedy.sample(logits) == 0  # 1 is now penalised too: 1.9 / 1.5 < 2.0 / 1.5


def test_logprobs_are_the_models_distribution():
    logits = torch.tensor([1.0, 2.0, 3.0, 0.5])
    sampler = Sampler(SamplingParams(temperature=0, logprobs=2, top_k=1), 4)
    token = sampler.sample(logits)
    expected = torch.log_softmax(logits, -1)
    lp = sampler.last_logprob
    assert token == 2 and lp is not None and math.isclose(lp.logprob, float(expected[2]))
    assert [t for t, _ in lp.top] == [2, 1]


def test_chat_n_logprobs_and_token_ids(model_server, tokenizer):
    messages = [{"role": "user", "content": "Count to three."}]
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny",
        messages=messages,
        n=3,
        max_tokens=6,
        seed=7,
        logprobs=True,
        top_logprobs=3,
        extra_body={
            "return_token_ids": True,
            "top_k": 50,
            "min_p": 0.01,
            "repetition_penalty": 1.1,
        },
    )
    assert [c.index for c in resp.choices] == [0, 1, 2]
    counted = httpx.post(model_server.url + "/v1/tokenize", json={"messages": messages}).json()
    prompt_ids = resp.model_extra["prompt_token_ids"]
    assert prompt_ids == counted["tokens"] and resp.usage.prompt_tokens == counted["count"]
    total = 0
    for choice in resp.choices:
        ids = choice.model_extra["token_ids"]
        entries = choice.logprobs.content
        assert len(ids) == len(entries) >= 1
        total += len(ids)
        for tid, entry in zip(ids, entries, strict=True):
            assert bytes(entry.bytes) == tokenizer.token_bytes(tid)
            assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
            assert entry.top_logprobs[0].logprob >= entry.logprob
        # The ids are the exact output: they decode to the raw text the parser saw.
        detok = httpx.post(model_server.url + "/v1/detokenize", json={"tokens": ids}).json()
        assert detok["prompt"] == tokenizer.decode(ids)
    assert resp.usage.completion_tokens == total


def test_completion_logprobs_and_token_ids_round_trip(model_server, tokenizer):
    c = client(model_server.url)
    prompt = "The agent opened the file and"
    done = c.completions.create(
        model="k3-tiny",
        prompt=prompt,
        max_tokens=8,
        seed=3,
        logprobs=2,
        n=2,
        extra_body={"return_token_ids": True},
    )
    assert done.model_extra["prompt_token_ids"] == tokenizer.encode(prompt, allow_special=True)
    for choice in done.choices:
        ids = choice.model_extra["token_ids"]
        lp = choice.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(ids)
        assert "".join(lp.tokens) == choice.text or choice.finish_reason == "stop"
        assert all(len(top) <= 2 for top in lp.top_logprobs)
    streamed = list(
        c.completions.create(
            model="k3-tiny",
            prompt=prompt,
            max_tokens=8,
            seed=3,
            logprobs=2,
            stream=True,
            extra_body={"return_token_ids": True},
        )
    )
    ids = [t for ch in streamed for c in ch.choices for t in (c.model_extra.get("token_ids") or [])]
    assert ids == done.choices[0].model_extra["token_ids"]  # same seed, same tokens


def test_streamed_chat_choices_carry_their_index(model_server):
    chunks = list(
        client(model_server.url).chat.completions.create(
            model="k3-tiny",
            messages=[{"role": "user", "content": "hi"}],
            n=2,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
        )
    )
    finished = {c.index for ch in chunks for c in ch.choices if c.finish_reason}
    assert finished == {0, 1}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 2


def test_metrics_expose_latency_histograms_and_cache_usage(model_server):
    client(model_server.url).completions.create(model="k3-tiny", prompt="x", max_tokens=3)
    text = httpx.get(model_server.url + "/metrics").text
    for name in (
        "k3stack_model_time_to_first_token_seconds_bucket",
        "k3stack_model_inter_token_latency_seconds_bucket",
        "k3stack_model_e2e_request_latency_seconds_count",
        "k3stack_model_queue_time_seconds_sum",
        "k3stack_model_engine_cache_usage",
        "k3stack_model_engine_running",
        "k3stack_model_engine_waiting",
    ):
        assert name in text, name
    count = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("k3stack_model_e2e_request_latency_seconds_count")
    )
    assert count >= 1


def test_models_retrieve(model_server):
    c = client(model_server.url)
    assert c.models.retrieve("k3-tiny").id == "k3-tiny"
    with pytest.raises(Exception, match="does not exist"):
        c.models.retrieve("nope")


def test_stop_string_is_reported(model_server, tokenizer):
    word = next(
        t
        for t in range(tokenizer.vocab_size)
        if not tokenizer.is_special(t)
        and tokenizer.token_bytes(t).strip().isalpha()
        and len(tokenizer.token_bytes(t).strip()) >= 3
    )
    text = tokenizer.token_bytes(word).decode()
    done = client(model_server.url).completions.create(
        model="k3-tiny",
        prompt="x",
        max_tokens=8,
        stop=[text],
        logit_bias={str(word): 100},
    )
    choice = done.choices[0]
    assert choice.finish_reason == "stop" and choice.text == ""
    assert choice.model_extra["stop_reason"] == text
