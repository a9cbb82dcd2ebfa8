"""Anthropic's Messages API through the official ``anthropic`` client: system, content blocks,
tool_use / tool_result, thinking, streaming, x-api-key, and Anthropic's error envelope."""

from __future__ import annotations

import anthropic
import httpx
import jsonschema
import pytest

from services.model.app import create_app
from tests.model.conftest import model_settings, running
from tests.model.test_structured import CLOCK, WEATHER

TOOLS = [
    {"name": "get_weather", "description": "Weather in a city.", "input_schema": WEATHER},
    {"name": "get_time", "input_schema": CLOCK},
]


def client(url: str, key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=120)


def test_tool_use_round_trip(model_server):
    c = client(model_server.url)
    ask = [{"role": "user", "content": "Weather in Paris for two days?"}]
    first = c.messages.create(
        model="k3-tiny",
        system="You are a weather bot.",
        messages=ask,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
        thinking={"type": "enabled", "budget_tokens": 1024},
        max_tokens=320,
    )
    assert first.type == "message" and first.stop_reason == "tool_use"
    assert first.content[0].type == "thinking"
    use = first.content[-1]
    assert use.type == "tool_use" and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER)
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0

    follow = c.messages.create(
        model="k3-tiny",
        messages=[
            *ask,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "21 C, sunny"},
                    {"type": "text", "text": "Thanks. Summarise."},
                ],
            },
        ],
        tools=TOOLS,
        tool_choice={"type": "none"},
        max_tokens=12,
    )
    assert follow.stop_reason in ("end_turn", "max_tokens")
    assert all(b.type == "text" for b in follow.content)


def test_stream_with_tools(model_server):
    c = client(model_server.url)
    with c.messages.stream(
        model="k3-tiny",
        messages=[{"role": "user", "content": "What time is it in Berlin?"}],
        tools=TOOLS,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        max_tokens=200,
    ) as stream:
        events = list(stream)
        kinds = [event.type for event in events]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert events[0].message.usage.input_tokens > 0  # known at message_start, as Anthropic's
    cached = final.usage.cache_read_input_tokens or 0
    assert events[0].message.usage.input_tokens == final.usage.input_tokens + cached
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    uses = [b for b in final.content if b.type == "tool_use"]
    assert len(uses) == 1 and final.stop_reason == "tool_use"
    schema = WEATHER if uses[0].name == "get_weather" else CLOCK
    jsonschema.validate(uses[0].input, schema)


def test_count_tokens_matches_the_prompt(model_server):
    c = client(model_server.url)
    messages = [{"role": "user", "content": "hello there"}]
    counted = c.messages.count_tokens(model="k3-tiny", messages=messages, tools=TOOLS)
    made = c.messages.create(model="k3-tiny", messages=messages, tools=TOOLS, max_tokens=1)
    assert counted.input_tokens == made.usage.input_tokens + made.usage.cache_read_input_tokens


def test_errors_use_anthropics_envelope(model_server):
    c = client(model_server.url)
    with pytest.raises(anthropic.BadRequestError) as info:
        c.messages.create(
            model="k3-tiny",
            messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}],
            max_tokens=4,
        )
    assert info.value.body["type"] == "error"
    assert "not supported" in info.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        c.messages.create(
            model="claude-nope", messages=[{"role": "user", "content": "x"}], max_tokens=1
        )
    r = httpx.post(
        model_server.url + "/v1/messages",
        content=b"{" + b" " * (9 << 20) + b"}",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"


def test_x_api_key_is_accepted_when_auth_is_on():
    from shared.settings import load_settings

    settings = load_settings(
        auth_enabled=True,
        model={**model_settings().model.model_dump(), "api_key": "s3cret"},
    )
    with running(create_app(settings)) as server:
        ok = client(server.url, key="s3cret").messages.create(
            model="k3-tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert ok.type == "message"
        with pytest.raises(anthropic.AuthenticationError):
            client(server.url, key="wrong").messages.create(
                model="k3-tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )


def test_stop_sequence_is_reported(model_server):
    c = client(model_server.url)
    ask = {"model": "k3-tiny", "messages": [{"role": "user", "content": "Go on."}]}
    greedy = {"extra_body": {"top_k": 1}}  # this SDK has no sampling arguments any more
    free = c.messages.create(**ask, max_tokens=24, **greedy)
    text = "".join(b.text for b in free.content if b.type == "text")
    assert len(text) >= 4, text  # greedy decoding of the random model: deterministic
    stopped = c.messages.create(**ask, max_tokens=24, stop_sequences=[text[2:4]], **greedy)
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == text[2:4]
    assert "".join(b.text for b in stopped.content if b.type == "text") == text[:2]
