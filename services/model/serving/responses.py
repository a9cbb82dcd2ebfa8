"""OpenAI's Responses API (``POST /v1/responses``, what Codex speaks) over the chat backend.

A request is translated to a chat completion request (input items -> chat messages, function
tools -> tools, ``reasoning.effort`` -> ``reasoning_effort``, ``text.format`` ->
``response_format``) and answered by the same backend; the answer is translated back into output
items: a ``reasoning`` item (the think channel), a ``message`` item (the response channel) and one
``function_call`` item per tool call. Streaming re-emits the chat deltas as Responses events
(``response.created`` ... ``response.completed``). Responses are kept unless ``store`` is false
(:mod:`~services.model.serving.response_store`), so ``previous_response_id`` continues one; with
the store off it is a 400, and callers send the whole conversation as input items, as Codex does.

What Codex sends is accepted (:mod:`~services.model.serving.client_tools`): ``custom`` tools (their
input constrained by their grammar, answered as ``custom_tool_call`` items), ``namespace`` tools
(flattened), hosted tools (dropped, named in a ``Warning`` header), ``custom_tool_call`` and
``custom_tool_call_output`` input items, and top-level fields it does not use (``client_metadata``,
``text.verbosity``, ...: ignored, named in a header).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.model.serving.client_tools import (
    INPUT_ARG,
    Offered,
    flat_name,
    responses_tools,
)
from services.model.serving.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    OpenAIError,
    Usage,
    _ClientRequest,
    chat_request,
    new_id,
)
from shared import sse as sse_wire

# ----- request ------------------------------------------------------------------------------------


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore")


class NamedFunctionChoice(_Item):
    type: Literal["function", "custom"] = "function"
    name: str


class ReasoningOptions(_Item):
    effort: Literal["none", "minimal", "low", "medium", "high", "max"] | None = None
    summary: str | None = None


class TextFormat(_Item):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextOptions(_Item):
    format: TextFormat | None = None


class ResponsesRequest(_ClientRequest):
    """The fields of ``client.responses.create`` this server honours (others: ignored, named in
    the ``X-K3stack-Ignored-Fields`` header)."""

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = Field(
        None,
        description="function, custom (grammar), namespace; hosted tools are dropped with a "
        "Warning header.",
    )
    tool_choice: Literal["none", "auto", "required"] | NamedFunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    reasoning: ReasoningOptions | None = None
    text: TextOptions | None = None
    stream: bool = False
    store: bool | None = Field(None, description="false: keep nothing (default: kept).")
    metadata: dict[str, str] | None = None
    user: str | None = None
    include: list[str] | None = Field(None, description="Accepted; reasoning is always included.")
    truncation: Literal["disabled", "auto"] | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = Field(None, description="Accepted and ignored.")
    client_metadata: dict[str, Any] | None = Field(None, description="Accepted and ignored.")
    service_tier: str | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)


# ----- response -----------------------------------------------------------------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class OutputText(_Out):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)


class ReasoningText(_Out):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ResponseItem(_Out):
    """One output item: ``reasoning``, ``message`` or ``function_call``."""

    type: str
    id: str
    status: str | None = "completed"


class ResponseUsage(_Out):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: dict[str, int] = Field(default_factory=dict)
    output_tokens_details: dict[str, int] = Field(default_factory=dict)


class ResponseDeleted(BaseModel):
    """The answer to ``DELETE /v1/responses/{id}`` (``client.responses.delete``)."""

    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class ResponseObject(_Out):
    id: str = Field(default_factory=lambda: new_id("resp"))
    object: Literal["response"] = "response"
    created_at: int = Field(default_factory=lambda: int(time.time()))
    status: Literal["completed", "incomplete", "in_progress", "failed"] = "completed"
    model: str
    output: list[ResponseItem] = Field(default_factory=list)
    usage: ResponseUsage | None = None
    incomplete_details: dict[str, str] | None = None
    error: dict[str, Any] | None = None
    instructions: str | None = None
    parallel_tool_calls: bool = True
    tool_choice: Any = "auto"
    tools: list[Any] = Field(default_factory=list)
    temperature: float | None = None
    top_p: float | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


# ----- translation -----------------------------------------------------------------------------------


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise OpenAIError(
            400, f"{where}.content: expected a string or a list of parts", param=where
        )
    out = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            raise OpenAIError(
                400,
                f"{where}.content[{i}]: part type {kind!r} is not supported (only text)",
                param=where,
            )
        out.append(str(part.get("text", "")))
    return "".join(out)


def _call(item: dict[str, Any], arguments: Any) -> dict[str, Any]:
    name = item.get("name")
    return {
        "id": item.get("call_id") or item.get("id"),
        "type": "function",
        "function": {
            "name": flat_name(item.get("namespace"), name) if isinstance(name, str) else name,
            "arguments": arguments,
        },
    }


def _output_text(item: dict[str, Any], where: str) -> str:
    output = item.get("output", "")
    return output if isinstance(output, str) else _text_of(output, where)


def to_chat_messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    """Input items -> chat messages; function calls join the assistant turn they follow."""
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    pending_reasoning: str | None = None

    def assistant() -> dict[str, Any]:
        nonlocal pending_reasoning
        last = messages[-1] if messages else None
        if last is None or last["role"] != "assistant" or pending_reasoning is not None:
            last = {"role": "assistant", "content": None}
            if pending_reasoning is not None:
                last["reasoning_content"] = pending_reasoning
                pending_reasoning = None
            messages.append(last)
        return last

    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise OpenAIError(400, f"{where}.role: {role!r} is not supported", param="input")
            text = _text_of(item.get("content", ""), where)
            if role == "assistant":
                msg = assistant()
                msg["content"] = (msg["content"] or "") + text
            else:
                messages.append({"role": role, "content": text})
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            pending_reasoning = _text_of(parts, where)
        elif kind in ("function_call", "custom_tool_call"):
            msg = assistant()
            if kind == "function_call":
                call = _call(item, item.get("arguments"))
            else:  # the raw input is the one argument of its chat function
                call = _call(item, json.dumps({INPUT_ARG: str(item.get("input", ""))}))
            msg["tool_calls"] = (msg.get("tool_calls") or []) + [call]
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": _output_text(item, where),
                }
            )
        else:
            raise OpenAIError(
                400, f"{where}.type: input item type {kind!r} is not supported", param="input"
            )
    return messages


def offered_tools(req: ResponsesRequest) -> Offered:
    return responses_tools(req.tools)


def to_chat_request(req: ResponsesRequest, offered: Offered | None = None) -> ChatCompletionRequest:
    if req.previous_response_id:
        raise OpenAIError(
            400,
            "previous_response_id: this server stores no responses; send the whole "
            "conversation as input items",
            param="previous_response_id",
        )
    fmt = req.text.format if req.text else None
    response_format: dict[str, Any] | None = None
    if fmt is not None and fmt.type == "json_object":
        response_format = {"type": "json_object"}
    elif fmt is not None and fmt.type == "json_schema":
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": fmt.name, "schema": fmt.schema_ or {}, "strict": fmt.strict},
        }
    offered = offered or offered_tools(req)
    choice: Any = req.tool_choice
    if isinstance(choice, NamedFunctionChoice):
        choice = {"type": "function", "function": {"name": choice.name}}
    body: dict[str, Any] = {
        "model": req.model,
        "messages": to_chat_messages(req),
        "tools": offered.tools or None,
        "tool_choice": choice,
        "parallel_tool_calls": req.parallel_tool_calls,
        "max_completion_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "seed": req.seed,
        "reasoning_effort": req.reasoning.effort if req.reasoning else None,
        "response_format": response_format,
        "stream": req.stream,
        "stream_options": {"include_usage": True} if req.stream else None,
    }
    return chat_request({k: v for k, v in body.items() if v is not None})


def _usage(usage: Usage | None) -> ResponseUsage | None:
    if usage is None:
        return None
    details = usage.completion_tokens_details
    cached = usage.prompt_tokens_details
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details={"cached_tokens": cached.cached_tokens if cached else 0},
        output_tokens_details={"reasoning_tokens": details.reasoning_tokens if details else 0},
    )


def _envelope(req: ResponsesRequest, model: str, **fields: Any) -> ResponseObject:
    return ResponseObject(
        model=model,
        instructions=req.instructions,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        tool_choice=(
            req.tool_choice.model_dump()
            if isinstance(req.tool_choice, BaseModel)
            else (req.tool_choice or "auto")
        ),
        tools=list(req.tools or []),
        temperature=req.temperature,
        top_p=req.top_p,
        metadata=req.metadata or {},
        **fields,
    )


def _reasoning_item(item_id: str, text: str) -> ResponseItem:
    return ResponseItem(
        type="reasoning", id=item_id, summary=[], content=[ReasoningText(text=text).model_dump()]
    )


def _message_item(item_id: str, text: str, status: str = "completed") -> ResponseItem:
    return ResponseItem(
        type="message",
        id=item_id,
        status=status,
        role="assistant",
        content=[OutputText(text=text).model_dump()],
    )


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, offered: Offered | None = None
) -> ResponseItem:
    """A chat tool call as the client's item: ``function_call`` (with its ``namespace``) or,
    for a custom tool, ``custom_tool_call`` with the raw input."""
    tool = offered.client_name(name) if offered is not None else None
    if tool is None:
        return ResponseItem(
            type="function_call", id=item_id, call_id=call_id, name=name, arguments=arguments
        )
    extra = {"namespace": tool.namespace} if tool.namespace else {}
    if tool.kind == "custom":
        return ResponseItem(
            type="custom_tool_call", id=item_id, call_id=call_id, name=tool.name,
            input=_custom_input(arguments), **extra,
        )  # fmt: skip
    return ResponseItem(
        type="function_call", id=item_id, call_id=call_id, name=tool.name, arguments=arguments,
        **extra,
    )  # fmt: skip


def _custom_input(arguments: str) -> str:
    """A custom call's raw input from its JSON wrapper ``{"input": "..."}``; a call cut by
    max_tokens has an unclosed wrapper (left as generated), so its string so far is read."""
    try:
        whole = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        head = "{" + json.dumps(INPUT_ARG) + ': "'
        if not arguments.startswith(head):
            return arguments
        body = arguments[len(head) :]
        for end in range(len(body), max(-1, len(body) - 6), -1):  # drop a half escape
            try:
                return str(json.loads('"' + body[:end] + '"'))
            except json.JSONDecodeError:
                continue
        return body
    return str(whole.get(INPUT_ARG, "")) if isinstance(whole, dict) else arguments


def from_chat(
    req: ResponsesRequest, answer: ChatCompletion, offered: Offered | None = None
) -> ResponseObject:
    offered = offered or offered_tools(req)
    choice = answer.choices[0]
    msg = choice.message
    output: list[ResponseItem] = []
    if msg.reasoning_content:
        output.append(_reasoning_item(new_id("rs"), msg.reasoning_content))
    if msg.content:
        output.append(_message_item(new_id("msg"), msg.content))
    for call in msg.tool_calls or []:
        output.append(
            _call_item(new_id("fc"), call.id, call.function.name, call.function.arguments, offered)
        )
    incomplete = choice.finish_reason == "length"
    return _envelope(
        req,
        answer.model,
        status="incomplete" if incomplete else "completed",
        incomplete_details={"reason": "max_output_tokens"} if incomplete else None,
        output=output,
        usage=_usage(answer.usage),
    )


class _StreamState:
    """Turns chat chunks into Responses events, one open output item at a time."""

    def __init__(self, req: ResponsesRequest, model: str, offered: Offered | None = None) -> None:
        self.req = req
        self.offered = offered or offered_tools(req)
        self.response = _envelope(req, model, status="in_progress")
        self.seq = 0
        self.output: list[ResponseItem] = []
        self.open: dict[str, Any] | None = None  # kind, id, index, text, call ids

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        out = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return out

    def start(self) -> list[dict[str, Any]]:
        snapshot = self.response.model_dump(mode="json")
        return [
            self.event("response.created", response=snapshot),
            self.event("response.in_progress", response=snapshot),
        ]

    def _close_open(self) -> list[dict[str, Any]]:
        cur, self.open = self.open, None
        if cur is None:
            return []
        idx, item_id, text = cur["index"], cur["id"], cur["text"]
        if cur["kind"] == "reasoning":
            item = _reasoning_item(item_id, text)
            events = [
                self.event(
                    "response.reasoning_text.done",
                    item_id=item_id,
                    output_index=idx,
                    content_index=0,
                    text=text,
                )
            ]
        elif cur["kind"] == "message":
            item = _message_item(item_id, text)
            part = OutputText(text=text).model_dump()
            events = [
                self.event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=idx,
                    content_index=0,
                    text=text,
                    logprobs=[],
                ),
                self.event(
                    "response.content_part.done",
                    item_id=item_id,
                    output_index=idx,
                    content_index=0,
                    part=part,
                ),
            ]
        else:
            item = _call_item(item_id, cur["call_id"], cur["name"], text, self.offered)
            if item.type == "custom_tool_call":
                done = {"type": "response.custom_tool_call_input.done", "input": item.input}  # type: ignore[attr-defined]
            else:
                done = {
                    "type": "response.function_call_arguments.done",
                    "name": item.name,  # type: ignore[attr-defined]
                    "arguments": text,
                }
            kind = done.pop("type")
            events = [self.event(kind, item_id=item_id, output_index=idx, **done)]
        self.output.append(item)
        events.append(
            self.event("response.output_item.done", output_index=idx, item=item.model_dump())
        )
        return events

    def _open_item(self, kind: str, **extra: Any) -> list[dict[str, Any]]:
        events = self._close_open()
        prefix = {"reasoning": "rs", "message": "msg", "function_call": "fc"}[kind]
        cur = {"kind": kind, "id": new_id(prefix), "index": len(self.output), "text": "", **extra}
        self.open = cur
        if kind == "reasoning":
            item = ResponseItem(type="reasoning", id=cur["id"], status="in_progress", summary=[])
        elif kind == "message":
            item = _message_item(cur["id"], "", status="in_progress")
            item.content = []  # type: ignore[attr-defined]
        else:
            item = _call_item(cur["id"], extra["call_id"], extra["name"], "", self.offered)
            item.status = "in_progress"
        events.append(
            self.event(
                "response.output_item.added", output_index=cur["index"], item=item.model_dump()
            )
        )
        if kind == "message":
            events.append(
                self.event(
                    "response.content_part.added",
                    item_id=cur["id"],
                    output_index=cur["index"],
                    content_index=0,
                    part=OutputText(text="").model_dump(),
                )
            )
        return events

    def feed(self, chunk: ChatCompletionChunk) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if chunk.usage is not None:
            self.response.usage = _usage(chunk.usage)
        for choice in chunk.choices:
            d = choice.delta
            if d.reasoning_content:
                if self.open is None or self.open["kind"] != "reasoning":
                    events += self._open_item("reasoning")
                assert self.open is not None
                self.open["text"] += d.reasoning_content
                events.append(
                    self.event(
                        "response.reasoning_text.delta",
                        item_id=self.open["id"],
                        output_index=self.open["index"],
                        content_index=0,
                        delta=d.reasoning_content,
                    )
                )
            if d.content:
                if self.open is None or self.open["kind"] != "message":
                    events += self._open_item("message")
                assert self.open is not None
                self.open["text"] += d.content
                events.append(
                    self.event(
                        "response.output_text.delta",
                        item_id=self.open["id"],
                        output_index=self.open["index"],
                        content_index=0,
                        delta=d.content,
                        logprobs=[],
                    )
                )
            for tc in d.tool_calls or []:
                if tc.id is not None:
                    name = tc.function.name if tc.function and tc.function.name else ""
                    events += self._open_item("function_call", call_id=tc.id, name=name)
                args = tc.function.arguments if tc.function else None
                if args and self.open is not None and self.open["kind"] == "function_call":
                    self.open["text"] += args
                    if self.offered.client_name(self.open["name"]).kind == "custom":
                        continue  # a custom input is whole only at the end (JSON-wrapped here)
                    events.append(
                        self.event(
                            "response.function_call_arguments.delta",
                            item_id=self.open["id"],
                            output_index=self.open["index"],
                            delta=args,
                        )
                    )
            if choice.finish_reason == "length":
                self.response.status = "incomplete"
                self.response.incomplete_details = {"reason": "max_output_tokens"}
        return events

    def finish(self) -> list[dict[str, Any]]:
        events = self._close_open()
        if self.response.status == "in_progress":
            self.response.status = "completed"
        self.response.output = self.output
        kind = (
            "response.completed" if self.response.status == "completed" else "response.incomplete"
        )
        events.append(self.event(kind, response=self.response.model_dump(mode="json")))
        return events


async def stream_events(
    req: ResponsesRequest,
    model: str,
    chunks: AsyncIterator[ChatCompletionChunk],
    offered: Offered | None = None,
) -> AsyncIterator[dict[str, Any]]:
    state = _StreamState(req, model, offered)
    first = True
    async for chunk in chunks:
        if first:
            for e in state.start():
                yield e
            first = False
        for e in state.feed(chunk):
            yield e
    if first:
        for e in state.start():
            yield e
    for e in state.finish():
        yield e


def sse(event: dict[str, Any]) -> str:
    if "type" not in event:  # an error body from the stream helper
        event = {"type": "error", **event.get("error", {})}
    return sse_wire.json_event(event, event["type"])
