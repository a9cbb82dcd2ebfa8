"""The reference engine on the real tiny K3 model (random weights): batching, sampling, stops."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from services.model.arch.config import K3Config
from services.model.arch.model import K3ForCausalLM
from services.model.arch.state import StatePools
from services.model.serving.engine import Engine, EngineError, StopStrings
from services.model.serving.runner import K3Runner
from services.model.serving.sampling import Sampler, SamplingParams, top_p_filter
from services.model.tokenizer import Piece


@pytest.fixture(scope="module")
def tiny_model() -> K3ForCausalLM:
    return K3ForCausalLM(K3Config.preset("tiny")).init_weights(0).eval()


class RecordingRunner(K3Runner):
    """The real runner, recording each step's chunk lengths (to check the scheduler)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.steps: list[list[int]] = []

    def forward(self, chunks: Sequence[Sequence[int]], states: Sequence[Any]):  # type: ignore[override]
        self.steps.append([len(c) for c in chunks])
        return super().forward(chunks, states)


def make_engine(
    model: K3ForCausalLM,
    tokenizer,
    *,
    seqs: int = 4,
    pool_tokens: int = 4096,
    budget: int = 64,
    max_model_len: int | None = None,
    prefix_cache: Any = None,
) -> Engine:
    pools = StatePools(model.config, seqs, pool_tokens)
    runner = RecordingRunner(model, pools, max_model_len=max_model_len)
    engine = Engine(
        runner, tokenizer, max_num_seqs=seqs, max_num_batched_tokens=budget,
        prefix_cache=prefix_cache,
    )  # fmt: skip
    engine.start()
    return engine


async def generate(engine: Engine, prompt: list[int], **params: Any) -> tuple[list[int], str, str]:
    params.setdefault("max_tokens", 8)
    stream = engine.stream(prompt, SamplingParams(**params))
    ids: list[int] = []
    text: list[str] = []
    reason = ""
    async for out in stream:
        ids += out.token_ids
        text += [p.text for p in out.pieces]
        reason = out.finish_reason or reason
    return ids, "".join(text), reason


def prompt_of(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text)


async def test_seeded_sampling_is_deterministic_across_batches(tiny_model, tokenizer):
    engine = make_engine(tiny_model, tokenizer)
    try:
        prompt = prompt_of(tokenizer, "The agent reads the email")
        solo = await generate(engine, prompt, seed=7, temperature=1.0, max_tokens=12)
        crowd = await asyncio.gather(
            generate(engine, prompt, seed=7, temperature=1.0, max_tokens=12),
            generate(engine, prompt_of(tokenizer, "other text"), seed=1, max_tokens=12),
            generate(engine, prompt, seed=8, temperature=1.0, max_tokens=12),
        )
        assert crowd[0][0] == solo[0]
        assert crowd[2][0] != solo[0]
        assert solo[2] == "length" and len(solo[0]) == 12
    finally:
        engine.stop()


def test_chunked_prefill_matches_one_chunk(tiny_model):
    pools = StatePools(tiny_model.config, 2, 512)
    runner = K3Runner(tiny_model, pools)
    prompt = [(i * 37) % 2000 for i in range(61)]
    a, b = runner.allocate(), runner.allocate()
    whole = runner.forward([prompt], [a])[0]
    for start in range(0, len(prompt), 7):
        last = runner.forward([prompt[start : start + 7]], [b])[0]
    torch.testing.assert_close(last, whole, rtol=1e-4, atol=1e-4)
    # and the next (batched) decode step agrees too
    da, db = runner.forward([[5], [5]], [a, b])
    torch.testing.assert_close(da, db, rtol=1e-4, atol=1e-4)


async def test_steps_mix_decodes_with_prefill_chunks_under_the_budget(tiny_model, tokenizer):
    engine = make_engine(tiny_model, tokenizer, budget=16)
    try:
        short = asyncio.create_task(generate(engine, [1, 2, 3], max_tokens=30, temperature=0))
        await asyncio.sleep(0.05)
        long = await generate(engine, list(range(10, 110)), max_tokens=3, temperature=0)
        await short
    finally:
        engine.stop()
    steps = engine.runner.steps  # type: ignore[attr-defined]
    assert all(sum(s) <= 16 for s in steps)
    assert any(1 in s and max(s) > 1 for s in steps), "no step mixed a decode with a prefill chunk"
    assert long[2] == "length" and len(long[0]) == 3


async def test_admission_waits_for_a_free_slot(tiny_model, tokenizer):
    engine = make_engine(tiny_model, tokenizer, seqs=2, budget=32)
    try:
        results = await asyncio.gather(
            *[generate(engine, [5 + i, 6, 7], max_tokens=6, seed=i) for i in range(6)]
        )
    finally:
        engine.stop()
    assert all(len(ids) == 6 and reason == "length" for ids, _, reason in results)
    assert max(len(s) for s in engine.runner.steps) <= 2  # type: ignore[attr-defined]
    assert engine.runner.num_free_slots == 2


async def test_preemption_when_latent_blocks_run_out(tiny_model, tokenizer):
    # 8 blocks of 16 tokens; three requests growing to 20 + 40 tokens cannot all fit.
    engine = make_engine(
        tiny_model, tokenizer, seqs=3, pool_tokens=128, budget=64, max_model_len=128
    )
    try:
        prompts = [[(7 * i + j) % 2000 for j in range(20)] for i in range(3)]
        results = await asyncio.gather(
            *[generate(engine, p, max_tokens=40, temperature=0) for p in prompts]
        )
        alone = await generate(engine, prompts[2], max_tokens=40, temperature=0)
    finally:
        engine.stop()
    assert engine.stats.num_preemptions > 0
    assert all(len(ids) == 40 for ids, _, _ in results)
    # recomputation after preemption continues the same greedy sequence
    assert results[2][0][:10] == alone[0][:10]
    engine.runner.pools.check_invariants()  # type: ignore[attr-defined]
    assert engine.runner.pools.num_free_blocks == engine.runner.pools.num_blocks  # type: ignore[attr-defined]


async def test_stop_strings_and_stop_tokens(tiny_model, tokenizer):
    engine = make_engine(tiny_model, tokenizer)
    prompt = prompt_of(tokenizer, "Write a Python function")
    try:
        ids, text, _ = await generate(engine, prompt, max_tokens=24, temperature=0)
        stop = text[len(text) // 2 : len(text) // 2 + 3]
        cut_ids, cut_text, reason = await generate(
            engine, prompt, max_tokens=24, temperature=0, stop=[stop]
        )
        assert reason == "stop"
        assert cut_text == text[: text.index(stop)]
        tok_ids, _, tok_reason = await generate(
            engine, prompt, max_tokens=24, temperature=0, stop_token_ids=[ids[3]]
        )
        assert tok_reason == "stop" and tok_ids == ids[: ids.index(ids[3]) + 1]
    finally:
        engine.stop()


async def test_too_long_requests_are_refused_and_aborts_free_state(tiny_model, tokenizer):
    engine = make_engine(tiny_model, tokenizer, max_model_len=64)
    try:
        with pytest.raises(EngineError, match="maximum context length is 64"):
            engine.stream(list(range(64)), SamplingParams(max_tokens=1))
        with pytest.raises(EngineError, match="max_tokens"):
            engine.stream(list(range(10)), SamplingParams(max_tokens=60))
        with pytest.raises(EngineError, match="empty"):
            engine.stream([], SamplingParams(max_tokens=1))
        stream = engine.stream([1, 2, 3], SamplingParams(max_tokens=50))
        await stream.__anext__()
        await stream.aclose()
        for _ in range(100):
            if engine.runner.num_free_slots == 4:
                break
            await asyncio.sleep(0.01)
        assert engine.runner.num_free_slots == 4
    finally:
        engine.stop()


async def test_prefix_cache_seam_is_consulted_and_aligns_chunks(tiny_model, tokenizer):
    class Observer:
        """Test double for the seam: caches nothing, records what the scheduler asks."""

        checkpoint_interval = 32  # a multiple of the KDA chunk, as the scheduler requires

        def __init__(self) -> None:
            self.matched: list[int] = []
            self.chunk_ends: list[int] = []
            self.finished: list[int] = []

        def match(self, token_ids, state) -> int:
            self.matched.append(len(token_ids))
            return 0

        def on_prefill_chunk(self, token_ids, state) -> None:
            self.chunk_ends.append(state.num_tokens)

        def on_finished(self, token_ids, state) -> None:
            self.finished.append(len(token_ids))

    seam = Observer()
    engine = make_engine(tiny_model, tokenizer, budget=40, prefix_cache=seam)
    try:
        await generate(engine, list(range(100)), max_tokens=2, temperature=0)
    finally:
        engine.stop()
    assert seam.matched == [100]
    prefill_ends = [e for e in seam.chunk_ends if e <= 100]
    assert prefill_ends[:-1] and all(e % 32 == 0 for e in prefill_ends[:-1])
    assert prefill_ends[-1] == 100
    assert seam.finished == [101]


def test_stop_strings_hold_back_only_possible_prefixes():
    s = StopStrings(["END", "xy"])
    out, stopped = s.push([Piece("abcE")])
    assert [p.text for p in out] == ["abc"] and not stopped
    out, stopped = s.push([Piece("Nq")])
    assert [p.text for p in out] == ["ENq"] and not stopped
    out, stopped = s.push([Piece("1x"), Piece("y2")])
    assert "".join(p.text for p in out) == "1" and stopped


def test_top_p_keeps_the_smallest_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    assert torch.equal(top_p_filter(probs, 0.7) > 0, torch.tensor([True, True, False, False]))
    assert torch.equal(top_p_filter(probs, 1e-6) > 0, torch.tensor([True, False, False, False]))
    greedy = Sampler(SamplingParams(temperature=0), 4)
    assert greedy.sample(torch.tensor([0.1, 3.0, 0.2, 0.0])) == 1


def test_streamed_tool_call_deltas_accumulate_like_the_openai_client(tokenizer):
    """Parser events -> chunk deltas -> the client's accumulation gives back the whole turn."""
    import json

    from openai.types.chat import ChatCompletionChunk as ClientChunk

    from services.model.serving.backends.reference import _events_to_deltas
    from services.model.serving.parser import StreamParser
    from services.model.serving.protocol import ChatChunkChoice, ChatCompletionChunk
    from services.model.serving.template import render_assistant
    from services.model.tokenizer import IncrementalDecoder

    calls = [
        {"id": "a", "function": {"name": "run_python", "arguments": '{"code": "print(\\"hi\\")\\n"}'}},
        {"id": "b", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": [1, 2]}'}},
    ]  # fmt: skip
    segs = render_assistant(reasoning="two calls", content="On it.", tool_calls=calls)
    ids = [i for t, sp in segs for i in ([tokenizer.special_id(t)] if sp else tokenizer.encode(t))]
    parser, dec = StreamParser("think"), IncrementalDecoder(tokenizer)
    reasoning, content = "", ""
    tool: dict[int, dict[str, str]] = {}
    for n, tid in enumerate(ids):
        events = parser.feed_many(dec.push(tid))
        if n == len(ids) - 1:
            events += parser.finish()
        for delta in _events_to_deltas(events):
            wire = ChatCompletionChunk(
                id="x", created=0, model="m", choices=[ChatChunkChoice(delta=delta)]
            ).model_dump_json(exclude_none=True)
            d = ClientChunk.model_validate_json(wire).choices[0].delta
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            content += d.content or ""
            for tc in d.tool_calls or []:
                slot = tool.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                slot["id"] += tc.id or ""
                slot["name"] += (tc.function.name if tc.function else None) or ""
                slot["args"] += (tc.function.arguments if tc.function else None) or ""
    assert (reasoning, content) == ("two calls", "On it.")
    assert [tool[i]["name"] for i in sorted(tool)] == ["run_python", "get_weather"]
    assert json.loads(tool[0]["args"]) == {"code": 'print("hi")\n'}
    assert json.loads(tool[1]["args"]) == {"city": "Paris", "days": [1, 2]}
    assert all(tool[i]["id"].startswith("call_") for i in tool)
