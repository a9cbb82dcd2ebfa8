"""Anthropic's Messages API (``POST /v1/messages``, what Claude Code speaks via
``ANTHROPIC_BASE_URL``) over the chat backend.

A request becomes a chat completion request: ``system`` -> a system message; content blocks ->
chat messages (``text``; ``tool_use`` -> the assistant's tool calls; ``tool_result`` -> tool
messages; ``thinking`` -> the assistant's reasoning); ``tools`` (``input_schema``) -> function
tools; ``tool_choice`` auto / any / tool / none -> auto / required / named / none (enforced by the
grammar, :mod:`~services.model.serving.structured`); ``thinking`` enabled -> thinking mode, with
the effort from ``budget_tokens``, otherwise instruct mode. The answer comes back as content
blocks, and streaming as Anthropic's named events (``message_start`` ... ``message_stop``).
Errors use Anthropic's envelope (``{"type": "error", "error": {"type", "message"}}``). The key
may come as ``x-api-key``, which is the platform's own header.

What Claude Code sends is accepted (:mod:`~services.model.serving.client_tools`): unknown fields
are ignored and named in a header; ``context_management`` and ``cache_control`` are accepted and
have no effect (the prefix cache needs no marks); ``output_config.effort`` sets the thinking effort;
``system`` messages inside ``messages`` stay system messages; server tools are dropped with a
``Warning`` header; ``anthropic-beta`` headers are not needed for any of it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.model.serving.client_tools import Offered, messages_tools
from services.model.serving.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    OpenAIError,
    TokenizeRequest,
    Usage,
    _ClientRequest,
    chat_request,
    new_id,
)
from shared import sse as sse_wire

THINKING_SIGNATURE = "k3stack-unsigned"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message},
    }


class ErrorResponse(BaseModel):
    type: Literal["error"] = "error"
    error: dict[str, str]


# ----- request ------------------------------------------------------------------------------------


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ToolChoice(_In):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(_In):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=1)


class OutputConfig(_In):
    effort: Literal["low", "medium", "high", "max"] | None = None


class MessagesRequest(_ClientRequest):
    """The fields of ``client.messages.create`` this server honours (others: ignored, named in
    the ``X-K3stack-Ignored-Fields`` header)."""

    model: str | None = None
    max_tokens: int = Field(ge=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = Field(
        None, description="Client tools; server tools (typed) are dropped with a Warning header."
    )
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = Field(None, description="effort: the thinking effort.")
    context_management: dict[str, Any] | None = Field(None, description="Accepted; no effect.")
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    stop_sequences: list[str] | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = Field(None, description="Accepted and ignored.")
    service_tier: str | None = None


class CountTokensRequest(_ClientRequest):
    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None


class CountTokensResponse(BaseModel):
    input_tokens: int


# ----- response -----------------------------------------------------------------------------------


class MessagesUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(default_factory=lambda: new_id("msg"))
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: MessagesUsage


# ----- translation --------------------------------------------------------------------------------


def _bad(message: str, param: str) -> OpenAIError:
    return OpenAIError(400, message, param=param)


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where}: expected a string or a list of content blocks", where)
    out = []
    for i, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else block
            raise _bad(
                f"{where}[{i}]: block type {kind!r} is not supported here (only text)", where
            )
        out.append(str(block.get("text", "")))
    return "".join(out)


def to_chat_messages(system: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": _text(system, "system")})
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        role = msg.get("role")
        content = msg.get("content", "")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if role not in ("user", "assistant", "system") or not isinstance(blocks, list):
            raise _bad(f"{where}: role must be 'user' or 'assistant' with content", where)
        if not all(isinstance(b, dict) for b in blocks):
            raise _bad(f"{where}.content: expected a string or a list of content blocks", where)
        if role == "system":  # Claude Code's mid-conversation system text
            out.append({"role": "system", "content": _text(blocks, f"{where}.content")})
            continue
        if role == "assistant":
            turn: dict[str, Any] = {"role": "assistant", "content": ""}
            calls = []
            for j, block in enumerate(blocks):
                kind = block.get("type")
                if kind == "text":
                    turn["content"] += str(block.get("text", ""))
                elif kind == "thinking":
                    turn["reasoning_content"] = (turn.get("reasoning_content") or "") + str(
                        block.get("thinking", "")
                    )
                elif kind == "redacted_thinking":
                    continue
                elif kind == "tool_use":
                    calls.append(
                        {
                            "id": block.get("id"),
                            "type": "function",
                            "function": {
                                "name": block.get("name"),
                                "arguments": json.dumps(block.get("input", {})),
                            },
                        }
                    )
                else:
                    raise _bad(f"{where}.content[{j}]: block type {kind!r} is not supported", where)
            if calls:
                turn["tool_calls"] = calls
            out.append(turn)
            continue
        texts = []
        for j, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "tool_result":
                result = _text(block.get("content", ""), f"{where}.content[{j}].content")
                if block.get("is_error"):
                    result = f"Error: {result}"
                out.append(
                    {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": result}
                )
            else:
                raise _bad(f"{where}.content[{j}]: block type {kind!r} is not supported", where)
        if texts:
            out.append({"role": "user", "content": "".join(texts)})
    return out


def _budget(thinking: Thinking | None) -> int | None:
    enabled = thinking is not None and thinking.type == "enabled"
    return thinking.budget_tokens if enabled and thinking else None


def _effort(thinking: Thinking | None, output: OutputConfig | None = None) -> str:
    if thinking is None or thinking.type == "disabled":
        return "none"
    if output is not None and output.effort is not None:
        return "high" if output.effort == "max" else output.effort
    budget = thinking.budget_tokens or 0
    if thinking.type == "adaptive" or not budget:
        return "medium"
    return "low" if budget < 4096 else "medium" if budget < 16384 else "high"


def _tool_fields(offered: Offered, choice: ToolChoice | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if offered.tools:
        fields["tools"] = offered.tools
    if choice is not None:
        if choice.type == "tool":
            if not choice.name:
                raise _bad("tool_choice.name: required for type 'tool'", "tool_choice")
            fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
        if choice.disable_parallel_tool_use:
            fields["parallel_tool_calls"] = False
    return fields


def _validate(body: dict[str, Any]) -> ChatCompletionRequest:
    return chat_request({k: v for k, v in body.items() if v is not None})


def offered_tools(req: MessagesRequest | CountTokensRequest) -> Offered:
    return messages_tools(req.tools)


def to_chat_request(req: MessagesRequest, offered: Offered | None = None) -> ChatCompletionRequest:
    offered = offered or offered_tools(req)
    return _validate(
        {
            "model": req.model,
            "messages": to_chat_messages(req.system, req.messages),
            **_tool_fields(offered, req.tool_choice),
            "max_completion_tokens": req.max_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "top_k": req.top_k,
            "stop": req.stop_sequences or None,
            "reasoning_effort": _effort(req.thinking, req.output_config),
            "thinking_budget_tokens": _budget(req.thinking),
            "stream": req.stream,
            "stream_options": {"include_usage": True} if req.stream else None,
        }
    )


def to_tokenize_request(req: CountTokensRequest) -> TokenizeRequest:
    chat = _validate(
        {
            "messages": to_chat_messages(req.system, req.messages),
            **_tool_fields(offered_tools(req), req.tool_choice),
            "reasoning_effort": _effort(req.thinking, req.output_config),
        }
    )
    return TokenizeRequest(
        messages=chat.messages,
        tools=chat.tools,
        tool_choice=chat.tool_choice,
        reasoning_effort=chat.reasoning_effort,
    )


_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _usage(usage: Usage | None) -> MessagesUsage:
    if usage is None:
        return MessagesUsage(input_tokens=0, output_tokens=0)
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return MessagesUsage(
        input_tokens=usage.prompt_tokens - cached,
        output_tokens=usage.completion_tokens,
        cache_read_input_tokens=cached,
    )


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {"_raw": text}


def from_chat(answer: ChatCompletion) -> Message:
    choice = answer.choices[0]
    msg = choice.message
    blocks: list[dict[str, Any]] = []
    if msg.reasoning_content:
        blocks.append(
            {"type": "thinking", "thinking": msg.reasoning_content, "signature": THINKING_SIGNATURE}
        )
    if msg.content:
        blocks.append({"type": "text", "text": msg.content})
    for call in msg.tool_calls or []:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.function.name,
                "input": _arguments(call.function.arguments),
            }
        )
    stop = choice.stop_reason
    return Message(
        model=answer.model,
        content=blocks,
        stop_reason="stop_sequence"
        if stop
        else _STOP.get(choice.finish_reason or "stop", "end_turn"),
        stop_sequence=stop,
        usage=_usage(answer.usage),
    )


async def stream_events(
    model: str, chunks: AsyncIterator[ChatCompletionChunk]
) -> AsyncIterator[dict[str, Any]]:
    """Chat chunks -> Anthropic stream events, one content block open at a time."""
    started = False
    index = -1
    open_kind: str | None = None
    stop_reason = "end_turn"
    stop_sequence: str | None = None
    usage: Usage | None = None

    def start(first: ChatCompletionChunk | None = None) -> dict[str, Any]:
        prompt = (first._num_prompt_tokens if first is not None else None) or 0
        message = Message(
            model=model, content=[], usage=MessagesUsage(input_tokens=prompt, output_tokens=0)
        )
        return {"type": "message_start", "message": message.model_dump()}

    def close() -> list[dict[str, Any]]:
        nonlocal open_kind
        if open_kind is None:
            return []
        events = []
        if open_kind == "thinking":
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": THINKING_SIGNATURE},
                }
            )
        events.append({"type": "content_block_stop", "index": index})
        open_kind = None
        return events

    def open_block(kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        nonlocal index, open_kind
        events = close()
        index += 1
        open_kind = kind
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        return events

    async for chunk in chunks:
        events: list[dict[str, Any]] = []
        if not started:
            events.append(start(chunk))
            started = True
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            d = choice.delta
            if d.reasoning_content:
                if open_kind != "thinking":
                    events += open_block(
                        "thinking", {"type": "thinking", "thinking": "", "signature": ""}
                    )
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": d.reasoning_content},
                    }
                )
            if d.content:
                if open_kind != "text":
                    events += open_block("text", {"type": "text", "text": ""})
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": d.content},
                    }
                )
            for tc in d.tool_calls or []:
                if tc.id is not None:
                    name = tc.function.name if tc.function and tc.function.name else ""
                    events += open_block(
                        "tool_use", {"type": "tool_use", "id": tc.id, "name": name, "input": {}}
                    )
                args = tc.function.arguments if tc.function else None
                if args and open_kind == "tool_use":
                    events.append(
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": args},
                        }
                    )
            if choice.finish_reason:
                stop_reason = _STOP.get(choice.finish_reason, "end_turn")
                if choice.stop_reason:
                    stop_reason, stop_sequence = "stop_sequence", choice.stop_reason
        for e in events:
            yield e
    if not started:
        yield start()
    for e in close():
        yield e
    final = _usage(usage)
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
        "usage": final.model_dump(),
    }
    yield {"type": "message_stop"}


def sse(event: dict[str, Any]) -> str:
    if "error" in event and "type" not in event:  # an OpenAIError body from the stream helper
        event = error_body(500, str(event["error"].get("message", "stream failed")))
    return sse_wire.json_event(event, event["type"])
