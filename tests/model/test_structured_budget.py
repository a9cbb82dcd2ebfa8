"""Budget-aware constrained output through the stock ``openai`` / ``anthropic`` clients: a forced
call either finishes valid or says ``length`` with ``truncated`` (never a repaired object),
JSON mode always parses strictly, and thinking stops at its budget exactly.

The tiny preset's random weights at temperature 1.5 are the adversary; ``bench/agent_load.py``
runs the same checks at the issue's full counts and prints them.
"""

from __future__ import annotations

import json

import jsonschema
from openai import OpenAI

from services.model.serving.parser import StreamParser, split_markers

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "note": {"type": "string"},
    },
    "required": ["city", "days", "units"],
}
SEARCH = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "filters": {"type": "array", "items": {}}},
    "required": ["query"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "search", "parameters": SEARCH}},
]
SCHEMAS = {"get_weather": WEATHER, "search": SEARCH}
ASK = [{"role": "user", "content": "Weather in Paris for three days, and search the news."}]


def client(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=240)


def _outcome(choice) -> str:
    extra = choice.model_extra or {}
    if choice.finish_reason == "tool_calls":
        assert not extra.get("truncated")
        for call in choice.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        return "valid"
    assert choice.finish_reason == "length", choice
    assert extra.get("truncated") is True, choice
    args = "".join(c.function.arguments for c in choice.message.tool_calls or [])
    if args:  # left as generated: never closed into an object that looks complete
        try:
            json.loads(args)
        except ValueError:
            pass
        else:
            raise AssertionError(f"a cut call was repaired into valid JSON: {args}")
    return "cut"


def test_forced_calls_finish_valid_or_say_length_with_the_flag(model_server):
    outcomes = []
    for max_tokens in (64, 200):
        resp = client(model_server.url).chat.completions.create(
            model="k3-tiny", messages=ASK, tools=TOOLS, tool_choice="required",
            max_tokens=max_tokens, temperature=1.5, n=4, seed=max_tokens,
        )  # fmt: skip
        outcomes += [_outcome(c) for c in resp.choices]
    assert "valid" in outcomes[4:], outcomes  # 200 tokens is room enough for a call


def test_single_forced_call_with_room_completes(model_server):
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny", messages=ASK, tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False, max_tokens=200, temperature=1.5, n=5, seed=7,
    )  # fmt: skip
    outcomes = [_outcome(c) for c in resp.choices]
    assert outcomes.count("valid") >= 4, outcomes


def test_json_mode_parses_strictly_at_high_temperature(model_server):
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny", messages=[{"role": "user", "content": "Reply in JSON."}],
        response_format={"type": "json_object"}, max_tokens=200, temperature=1.5, n=6, seed=3,
    )  # fmt: skip
    for choice in resp.choices:
        assert choice.finish_reason == "stop", choice
        assert isinstance(json.loads(choice.message.content, strict=True), dict)


def test_thinking_stops_at_its_budget_exactly(model_server):
    for tools in (None, TOOLS):
        for seed in (5, 6):
            resp = client(model_server.url).chat.completions.create(
                model="k3-tiny", messages=ASK, max_tokens=160, temperature=1.5, seed=seed,
                reasoning_effort="high", extra_body={"thinking_budget_tokens": 12},
                **({"tools": tools, "tool_choice": "required"} if tools else {}),
            )  # fmt: skip
            assert resp.usage.completion_tokens_details.reasoning_tokens <= 12


def test_anthropic_thinking_budget_caps_the_thought(model_server):
    import anthropic

    c = anthropic.Anthropic(base_url=model_server.url, api_key="unused", max_retries=0)
    msg = c.messages.create(
        model="k3-tiny", max_tokens=64,
        thinking={"type": "enabled", "budget_tokens": 1},
        messages=[{"role": "user", "content": "Think, then answer."}],
    )  # fmt: skip
    thought = "".join(b.thinking for b in msg.content if b.type == "thinking")
    assert len(thought.encode()) <= 32  # one token's text at most


def test_a_cut_call_is_left_as_generated():
    text = '[open]tools[sep][open]call tool="f" index:=0[sep][open]arg name="city"[sep]Par'
    parser = StreamParser("response")
    parser.feed_text("[close]response[sep]" + text)
    parser.finish(cut=True)
    result = parser.result()
    assert parser.truncated
    assert result.tool_calls[0].arguments == '{"city": "Par'
    repaired = StreamParser("response")
    repaired.feed_many(split_markers("[close]response[sep]" + text))
    repaired.finish()
    assert json.loads(repaired.result().tool_calls[0].arguments) == {"city": "Par"}
