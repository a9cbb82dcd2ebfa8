"""OpenAI's Responses API through the official client: items, function tools, reasoning, streaming."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from openai import OpenAI

from tests.model.test_structured import CLOCK, WEATHER

TOOLS = [
    {"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True},
    {"type": "function", "name": "get_time", "parameters": CLOCK},
]


def client(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_function_call_round_trip(model_server):
    c = client(model_server.url)
    first = c.responses.create(
        model="k3-tiny",
        instructions="You are a weather bot.",
        input=[{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,
        tool_choice={"type": "function", "name": "get_weather"},
        reasoning={"effort": "low"},
        max_output_tokens=320,
    )
    assert first.status == "completed" and first.object == "response"
    kinds = [item.type for item in first.output]
    assert kinds[0] == "reasoning" and kinds[-1] == "function_call", kinds
    call = first.output[-1]
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0

    # Send the whole conversation back with the tool's output, as Codex does.
    follow = c.responses.create(
        model="k3-tiny",
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            *[item.model_dump(exclude_none=True) for item in first.output],
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'},
        ],
        tools=TOOLS,
        tool_choice="none",
        reasoning={"effort": "none"},
        max_output_tokens=16,
    )
    assert follow.status in ("completed", "incomplete")
    assert all(item.type != "function_call" for item in follow.output)
    assert follow.output_text == "".join(
        part.text for item in follow.output if item.type == "message" for part in item.content
    )


def test_streaming_events(model_server):
    events = list(
        client(model_server.url).responses.create(
            model="k3-tiny",
            input="Say hi.",
            tools=TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
            reasoning={"effort": "low"},
            max_output_tokens=320,
            stream=True,
        )
    )
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.reasoning_text.delta" in types
    assert "response.function_call_arguments.delta" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    call = next(item for item in final.output if item.type == "function_call")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == call.arguments
    json.loads(call.arguments)
    assert final.usage is not None and final.usage.output_tokens > 0


def test_json_schema_text_format(model_server):
    resp = client(model_server.url).responses.create(
        model="k3-tiny",
        input="Weather?",
        text={"format": {"type": "json_schema", "name": "w", "schema": CLOCK, "strict": True}},
        reasoning={"effort": "none"},
        max_output_tokens=60,
    )
    jsonschema.validate(json.loads(resp.output_text), CLOCK)


def test_unsupported_inputs_are_400s(model_server):
    c = client(model_server.url)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        c.responses.create(model="k3-tiny", input="x", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="not supported"):
        c.responses.create(
            model="k3-tiny",
            input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
        )
