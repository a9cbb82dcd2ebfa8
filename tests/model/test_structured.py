"""Structured output through the official ``openai`` client: forced tool choice and JSON modes are
enforced by a grammar (xgrammar), so even the tiny preset's random weights always produce a tool
call with schema-valid arguments, or JSON matching the schema.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from openai import OpenAI

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "detailed": {"type": "boolean"},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
CLOCK = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["zone"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": CLOCK}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": CLOCK}
ASK = [{"role": "user", "content": "Weather in Paris for three days?"}]
ANSWER = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "score": {"type": "integer", "minimum": 0, "maximum": 100},
        "label": {"type": "string", "enum": ["yes", "no", "maybe"]},
    },
    "required": ["ok", "score", "label"],
    "additionalProperties": False,
}


def client(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _valid_calls(message) -> list[str]:
    assert message.tool_calls, message
    for call in message.tool_calls:
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, SCHEMAS[call.function.name])
    return [c.function.name for c in message.tool_calls]


@pytest.mark.parametrize("effort", ["none", "low"])
def test_required_tool_choice_always_yields_valid_calls(model_server, effort):
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        reasoning_effort=effort,
        max_tokens=320,  # thinking gets at most a quarter; a call takes under 100
        n=4,
        seed=0,
    )
    for choice in resp.choices:
        assert choice.finish_reason == "tool_calls", choice
        assert not choice.model_extra.get("parse_errors")
        assert len(_valid_calls(choice.message)) == 1


def test_required_parallel_calls_are_all_valid(model_server):
    # At most 8 calls of at most ~40 tokens each: 600 tokens always leave room to finish.
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        reasoning_effort="none",
        max_tokens=600,
        seed=21,
    )
    for choice in resp.choices:
        assert choice.finish_reason == "tool_calls", choice
        _valid_calls(choice.message)


def test_named_tool_choice_calls_exactly_that_tool(model_server):
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        reasoning_effort="none",
        max_tokens=80,
        n=3,
        seed=11,
    )
    for choice in resp.choices:
        assert _valid_calls(choice.message) == ["get_time"]


def test_tool_choice_none_never_calls(model_server):
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice="none",
        reasoning_effort="none",
        max_tokens=24,
        n=4,
        seed=5,
        # push the tools channel's opening up: the grammar must still refuse it
        logit_bias={"2032": 20},
    )
    assert all(not ch.message.tool_calls for ch in resp.choices)


def test_strict_tools_under_auto_get_valid_arguments(model_server):
    strict = [{"type": "function", "function": {**t["function"], "strict": True}} for t in TOOLS]
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny",
        messages=ASK,
        tools=strict,
        reasoning_effort="none",
        max_tokens=80,
        n=6,
        seed=2,
    )
    for choice in resp.choices:
        if choice.message.tool_calls:
            _valid_calls(choice.message)
        assert not choice.model_extra.get("parse_errors"), choice


@pytest.mark.parametrize("effort", ["none", "high"])
def test_json_schema_response_always_validates(model_server, effort):
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny",
        messages=[{"role": "user", "content": "Is it sunny?"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": ANSWER, "strict": True},
        },
        reasoning_effort=effort,
        max_tokens=120,
        n=4,
        seed=9,
    )
    for choice in resp.choices:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), ANSWER)


def test_json_object_response_is_an_object_when_it_finishes(model_server):
    resp = client(model_server.url).chat.completions.create(
        model="k3-tiny",
        messages=[{"role": "user", "content": "Reply in JSON."}],
        response_format={"type": "json_object"},
        reasoning_effort="none",
        max_tokens=64,
        n=4,
        seed=1,
    )
    for choice in resp.choices:
        text = choice.message.content
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(text), dict)
        else:  # cut by max_tokens: still the start of an object
            assert text.lstrip().startswith("{")


def test_forced_tool_call_streams_valid_arguments(model_server):
    chunks = list(
        client(model_server.url).chat.completions.create(
            model="k3-tiny",
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            reasoning_effort="none",
            max_tokens=120,
            seed=4,
            stream=True,
        )
    )
    args = "".join(
        tc.function.arguments or ""
        for ch in chunks
        for c in ch.choices
        for tc in (c.delta.tool_calls or [])
        if tc.function is not None
    )
    jsonschema.validate(json.loads(args), WEATHER)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_unenforceable_schema_is_a_400(model_server):
    import openai

    with pytest.raises(openai.BadRequestError, match="cannot enforce"):
        client(model_server.url).chat.completions.create(
            model="k3-tiny",
            messages=ASK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object", "$ref": "#/nope"}},
            },
            max_tokens=4,
        )
