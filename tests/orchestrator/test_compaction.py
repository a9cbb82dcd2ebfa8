"""Compaction acceptance: a long synthetic episode crosses the threshold again and again under
every policy; after each compaction the context is within budget, summaries hold the preset's
sections, no tool call is separated from its result, and the trajectory links the segments."""

from __future__ import annotations

import json

import pytest

from services.orchestrator.context.compaction import (
    STRATEGIES,
    Compaction,
    Compactor,
    Strategy,
    calls_paired,
    has_sections,
    units,
)
from services.orchestrator.context.tokens import ApproxTokenCounter
from services.orchestrator.episode.loop import Loop, MemoryJournal, Runtime
from services.orchestrator.episode.policy import ScriptedPolicy, Turn
from services.orchestrator.episode.state import initial_state
from services.orchestrator.harness.config import PRESET_NAMES, load_harness
from services.orchestrator.tools.base import Tool, ToolSet
from services.orchestrator.tools.builtin import ToolContext

WINDOW = 4096


def echo_tools() -> ToolSet:
    tools = ToolSet()
    tools.add(
        Tool(
            name="fetch_report",
            description="Returns a long report.",
            parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
            run=lambda ctx, a: f"report {a.get('n')}: " + ("lorem ipsum dolor " * 40),
        )
    )
    return tools


def chatty(view) -> Turn:
    """Two tool calls per turn, each with a long result; never finishes on its own."""
    n = view.step
    return Turn(
        content=f"Working on part {n}.",
        tool_calls=[
            {"id": f"c{n}a", "name": "fetch_report", "arguments": json.dumps({"n": 2 * n})},
            {"id": f"c{n}b", "name": "fetch_report", "arguments": json.dumps({"n": 2 * n + 1})},
        ],
        usage={"prompt_tokens": 10, "completion_tokens": 5},
    )


def run_long_episode(preset: str, policy: str, steps: int = 60):
    harness = load_harness(preset)
    harness.context.policy = policy
    harness.budgets.max_steps = steps
    harness.budgets.steps_per_day = 10_000
    tools = echo_tools()
    scripted = ScriptedPolicy(chatty)
    scripted.sections = list(harness.context.summary_sections)
    compactor = Compactor(
        harness.context, WINDOW, ApproxTokenCounter(), scripted.summarize, tools.specs()
    )
    rt = Runtime(
        harness=harness, tools=tools, ctx=ToolContext(), policy=scripted, compactor=compactor,
        journal=MemoryJournal(), world=None, episode_id="synthetic",
    )  # fmt: skip
    state = initial_state("You are a test agent.", "Read every report.")
    items: list[tuple[str, dict, int]] = []
    loop = Loop(rt, state, lambda kind, body: items.append((kind, body, state.segment)))
    contexts = []
    while not loop.done:
        loop.tick()
        if items and items[-1][0] == "compaction":
            contexts.append(list(state.messages))
    return harness, compactor, state, items, contexts


@pytest.mark.parametrize("preset", PRESET_NAMES)
@pytest.mark.parametrize("policy", ["summary", "masking", "clearing", "hybrid"])
def test_long_episode_compacts_repeatedly_within_budget(preset: str, policy: str) -> None:
    harness, compactor, state, items, contexts = run_long_episode(preset, policy)
    compactions = [body for kind, body, _ in items if kind == "compaction"]
    assert len(compactions) >= 3, f"only {len(compactions)} compactions"
    assert state.exit_reason == "max_steps"
    for body, context in zip(compactions, contexts, strict=True):
        assert body["tokens_before"] >= compactor.threshold
        assert body["tokens_after"] < compactor.threshold
        assert compactor.count(context) == body["tokens_after"]
        assert calls_paired(context[1:]), "a tool call was separated from its result"
        assert context[0]["role"] == "system"
        if body["summary"] is not None:
            assert has_sections(body["summary"], harness.context.summary_sections)
            assert any(harness.context.summary_prefix in (m.get("content") or "")
                       for m in context)  # fmt: skip
    # segments: each compaction closes segment k and opens k+1, in order
    assert [(b["segment_from"], b["segment_to"]) for b in compactions] == [
        (k, k + 1) for k in range(len(compactions))
    ]
    segments_seen = [seg for _, _, seg in items]
    assert segments_seen == sorted(segments_seen)
    assert state.segment == len(compactions)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_each_preset_summary_holds_its_sections(preset: str) -> None:
    harness, _, _, items, contexts = run_long_episode(preset, "summary", steps=30)
    summaries = [b["summary"] for k, b, _ in items if k == "compaction"]
    assert summaries
    for text in summaries:
        for section in harness.context.summary_sections:
            assert section in text


def test_none_policy_never_compacts() -> None:
    _, _, state, items, _ = run_long_episode("claude-code", "none", steps=20)
    assert not [k for k, _, _ in items if k == "compaction"]
    assert state.compactions == 0


def test_units_keep_calls_with_results() -> None:
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "x", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "assistant", "content": "done"},
    ]  # fmt: skip
    groups = units(msgs)
    assert [len(g) for g in groups] == [1, 3, 1]
    assert calls_paired(msgs)
    assert not calls_paired(msgs[:3])
    assert not calls_paired([msgs[0], msgs[2]])


def test_kimi_keeps_the_last_user_turn_verbatim() -> None:
    harness = load_harness("kimi-code")
    msgs = [{"role": "system", "content": "sys"}]
    for i in range(30):
        msgs.append({"role": "user", "content": f"question {i} " + "x" * 400})
        msgs.append({"role": "assistant", "content": f"answer {i} " + "y" * 400})
    scripted = ScriptedPolicy(chatty)
    scripted.sections = harness.context.summary_sections
    comp = Compactor(harness.context, WINDOW, ApproxTokenCounter(), scripted.summarize)
    out = comp.compact(msgs)
    assert out.tokens_after < comp.threshold
    assert out.messages[-2]["content"].startswith("question 29")
    assert out.messages[-1]["content"].startswith("answer 29")
    assert out.messages[1]["content"].startswith(harness.context.summary_prefix)


def test_triggers_count_with_the_models_tokenizer(model_url: str) -> None:
    """The same long episode, counted by the model service's tokenizer (chat template and
    tools included): compactions fire on that count and leave the context under it."""
    from services.orchestrator.context.tokens import ModelTokenCounter
    from shared.clients import ModelClient

    harness = load_harness("claude-code")
    harness.budgets.max_steps = 25
    harness.budgets.steps_per_day = 10_000
    tools = echo_tools()
    scripted = ScriptedPolicy(chatty)
    scripted.sections = list(harness.context.summary_sections)
    with ModelClient(model_url, timeout=60.0) as client:
        counter = ModelTokenCounter(client)
        compactor = Compactor(harness.context, WINDOW, counter, scripted.summarize, tools.specs())
        rt = Runtime(
            harness=harness, tools=tools, ctx=ToolContext(), policy=scripted,
            compactor=compactor, journal=MemoryJournal(), episode_id="tok",
        )  # fmt: skip
        state = initial_state("You are a test agent.", "Read every report.")
        items: list[tuple[str, dict]] = []
        loop = Loop(rt, state, lambda kind, body: items.append((kind, body)))
        while not loop.done:
            loop.tick()
        compactions = [b for k, b in items if k == "compaction"]
        assert len(compactions) >= 2
        assert all(b["counter"] == "model-tokenizer" for b in compactions)
        assert all(b["tokens_after"] < compactor.threshold <= b["tokens_before"]
                   for b in compactions)  # fmt: skip


@pytest.mark.slow
def test_the_model_counter_asks_once_per_message_and_matches_the_whole_count(model_url) -> None:
    """Counting a growing context asks the tokenizer once per new message (never once per
    count), and the sum of the parts stays within a few tokens a message of the model's own
    count of the whole context."""
    from services.orchestrator.context.tokens import ModelTokenCounter
    from shared.clients import ModelClient

    tools = echo_tools().specs()
    messages = [{"role": "system", "content": "You are a test agent."},
                {"role": "user", "content": "Read every report."}]  # fmt: skip
    for n in range(6):
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "fetch_report", "arguments": json.dumps({"n": n})}}  # fmt: skip
        messages += [{"role": "assistant", "content": f"part {n}", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{n}", "content": "lorem " * 50}]  # fmt: skip
    with ModelClient(model_url, timeout=60.0) as client:
        counter = ModelTokenCounter(client)
        counted = counter.count(messages, tools)
        whole = int(
            client.post_json("/v1/tokenize", {"messages": messages, "tools": tools})["count"]
        )
        calls = counter.calls
        assert counter.count(messages, tools) == counted and counter.calls == calls
        messages.append({"role": "user", "content": "And now?"})
        counter.count(messages, tools)
        assert counter.calls == calls + 1
    assert abs(counted - whole) <= 3 * len(messages), (counted, whole)


def test_strategies_are_registered_classes_the_compactor_dispatches_to(monkeypatch) -> None:
    """Every policy a harness may name has a registered Strategy class; the Compactor finds it
    by name (a replacement registered under the name is what runs); an unknown name is an
    error listing the known ones."""
    from typing import get_args

    from services.orchestrator.harness.config import ContextPolicy

    names = set(get_args(ContextPolicy.model_fields["policy"].annotation))
    assert names == set(STRATEGIES)
    assert all(issubclass(cls, Strategy) and cls.name == n for n, cls in STRATEGIES.items())
    seen: list[int] = []

    class Recording(Strategy):
        def compact(self, c, messages, before, number):  # type: ignore[no-untyped-def]
            seen.append(number)
            return Compaction("recorded", messages[:1], before, c.count(messages[:1]))

    monkeypatch.setitem(STRATEGIES, "masking", Recording)
    cfg = load_harness("claude-code").context
    cfg.policy = "masking"
    comp = Compactor(cfg, WINDOW, ApproxTokenCounter(), lambda m, p: "unused")
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u " * 50}]
    out = comp.compact(msgs, number=4)
    assert (out.kind, seen, len(out.messages)) == ("recorded", [4], 1)
    cfg.policy = "none"
    assert not comp.needed(msgs, tokens=10**9)
    monkeypatch.delitem(STRATEGIES, "summary")
    cfg.policy = "summary"
    with pytest.raises(ValueError, match="unknown compaction policy 'summary'"):
        comp.compact(msgs)
