"""The openai upstream backend reads server-sent events with httpx-sse: event names, comments and
multi-line data are handled by the library; a non-SSE answer to a stream is a 502 naming it."""

from __future__ import annotations

import json

import httpx
import pytest

from services.model.serving.backends.openai_proxy import OpenAIProxyBackend
from services.model.serving.protocol import ChatCompletionRequest, OpenAIError

REQ = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], stream=True)


def _chunk(text: str) -> dict:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }


def _backend(handler) -> OpenAIProxyBackend:  # type: ignore[no-untyped-def]
    return OpenAIProxyBackend(
        "served", upstream_url="http://up/v1", transport=httpx.MockTransport(handler)
    )


async def test_events_comments_and_multiline_data_are_parsed():
    first = json.dumps(_chunk("Hel"), indent=1)  # JSON over several data: lines
    body = (
        ": keep-alive comment\n\n"
        "event: chunk\n" + "".join(f"data: {line}\n" for line in first.splitlines()) + "\n"
        f"data: {json.dumps(_chunk('lo'))}\n\n"
        "data: [DONE]\n\n"
    )

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    backend = _backend(handler)
    chunks = [c async for c in backend.chat_stream(REQ)]
    await backend.stop()
    assert "".join(c.choices[0].delta.content for c in chunks) == "Hello"
    assert {c.model for c in chunks} == {"served"}


async def test_a_non_sse_answer_to_a_stream_is_a_502():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=_chunk("x"))

    backend = _backend(handler)
    with pytest.raises(OpenAIError) as info:
        [c async for c in backend.chat_stream(REQ)]
    await backend.stop()
    assert info.value.status == 502 and "text/event-stream" in info.value.message
