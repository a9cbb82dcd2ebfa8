"""The oracle engine: the scenario's oracle plan answered as a model would, in the client's own
wire format, so a real CLI driven by it must solve the scenario with its own tool calls.

From a request's tool list (Anthropic ``tools``, Chat Completions ``tools``, or Responses
``tools`` with namespaces) it finds the offered name of the plan's next step
(``mcp__<app>__<tool>``, or a namespace ending in ``<app>__`` holding ``<tool>``) and, once the
world clock has reached the step's time, answers with that one call (Anthropic ``tool_use``;
Chat Completions ``tool_calls``; Responses ``function_call``); otherwise a short
"done for now" text, and :meth:`wake_at` tells the day driver when the next step is due. A step
whose tool the request does not offer waits (the client may offer it after a tool search), and
requests that offer no world tool at all (a CLI's own side calls) get the plain text.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

DONE = "Done for now."


def _key(name: str) -> str:
    """Codex spells an MCP tool's hyphens as underscores (``create-event`` -> ``create_event``)."""
    return name.replace("-", "_")


def _offered(api: str, body: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """flat name -> (the client's name, its namespace)."""
    out: dict[str, tuple[str, str | None]] = {}

    def walk(tools: list[Any], namespace: str | None) -> None:
        for t in tools:
            if not isinstance(t, dict):
                continue
            if t.get("type") == "function" and isinstance(t.get("function"), dict):
                t = {**t["function"], "type": "function"}  # Chat Completions' shape
            if not isinstance(t.get("name"), str):
                continue
            if t.get("type") == "namespace":
                walk(t.get("tools") or [], t["name"])
            elif api == "messages" or t.get("type", "function") == "function":
                flat = t["name"] if not namespace else namespace.rstrip("_") + "__" + t["name"]
                out[flat] = (t["name"], namespace)

    walk(body.get("tools") or [], None)
    return out


def offers_world_tools(api: str, body: dict[str, Any], apps: list[str]) -> bool | None:
    """Whether a request offers a tool of one of the world's ``apps`` (``mcp__<app>__...``, by
    any client's spelling); None when it offers no tools at all (a CLI's side call)."""
    offered = _offered(api, body)
    if not offered:
        return None
    prefixes = tuple(_key(f"mcp__{app}__") for app in apps)
    return any(_key(name).startswith(prefixes) for name in offered)


class OracleEngine:
    def __init__(self, plan: dict[str, Any], now: Callable[[], datetime]) -> None:
        self.steps = plan["steps"]
        self.now = now
        self.next = 0
        self.lock = threading.Lock()

    def wake_at(self) -> datetime | None:
        return (
            datetime.fromisoformat(self.steps[self.next]["at"])
            if self.next < len(self.steps)
            else None
        )

    def _pick(
        self, offered: dict[str, tuple[str, str | None]]
    ) -> tuple[str, str | None, dict] | None:
        if not any(name.startswith("mcp__") for name in offered) or self.next >= len(self.steps):
            return None
        step = self.steps[self.next]
        if datetime.fromisoformat(step["at"]) > self.now():
            return None
        want = _key(f"mcp__{step['app']}__{step['tool']}")
        found = next((v for k, v in offered.items() if _key(k) == want), None)
        if found is None:
            return None
        self.next += 1
        name, namespace = found
        return name, namespace, step["arguments"]

    def respond(self, api: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, Any]]:
        """(status, a JSON answer or the events of a stream when the request streams, a note
        for the record: which call the oracle made)."""
        if api not in ("messages", "responses", "chat/completions"):
            return 404, {"error": {"message": f"the oracle engine does not answer /v1/{api}"}}, {}
        with self.lock:
            call = self._pick(_offered(api, body))
        model, stream = str(body.get("model") or "oracle"), bool(body.get("stream"))
        make = {"messages": _anthropic, "responses": _responses, "chat/completions": _chat}[api]
        answer = make(model, call, stream)
        return 200, answer, {"oracle_call": call[0] if call else None}


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _anthropic(model: str, call: tuple | None, stream: bool) -> dict | list[dict]:
    if call:
        name, _, args = call
        block = {"type": "tool_use", "id": _id("toolu"), "name": name, "input": args}
        stop = "tool_use"
    else:
        block, stop = {"type": "text", "text": DONE}, "end_turn"
    usage = {"input_tokens": 0, "output_tokens": 1}
    message = {"id": _id("msg"), "type": "message", "role": "assistant", "model": model,
               "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}  # fmt: skip
    if not stream:
        return message
    start = {**block, "input": {}} if call else {"type": "text", "text": ""}
    delta = (
        {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        if call
        else {"type": "text_delta", "text": DONE}
    )
    return [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": usage,
        },
        {"type": "message_stop"},
    ]


def _responses(model: str, call: tuple | None, stream: bool) -> dict | list[dict]:
    if call:
        name, namespace, args = call
        item = {"type": "function_call", "id": _id("fc"), "call_id": _id("call"), "name": name,
                "arguments": json.dumps(args), "status": "completed"}  # fmt: skip
        if namespace:
            item["namespace"] = namespace
    else:
        item = {"type": "message", "id": _id("msg"), "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": DONE, "annotations": []}]}  # fmt: skip
    usage = {"input_tokens": 0, "output_tokens": 1, "total_tokens": 1,
             "input_tokens_details": {"cached_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
    response = {"id": _id("resp"), "object": "response", "status": "completed", "model": model,
                "output": [item], "usage": usage}  # fmt: skip
    if not stream:
        return response
    pending = {**response, "status": "in_progress", "output": []}
    return [
        {"type": "response.created", "sequence_number": 0, "response": pending},
        {
            "type": "response.output_item.added",
            "sequence_number": 1,
            "output_index": 0,
            "item": item,
        },
        {
            "type": "response.output_item.done",
            "sequence_number": 2,
            "output_index": 0,
            "item": item,
        },
        {"type": "response.completed", "sequence_number": 3, "response": response},
    ]


def _chat(model: str, call: tuple | None, stream: bool) -> dict | list[dict]:
    """Chat Completions: one ``tool_calls`` entry, or the text; a stream is its chunks."""
    if call:
        name, _, args = call
        calls = [{"index": 0, "id": _id("call"), "type": "function",
                  "function": {"name": name, "arguments": json.dumps(args)}}]  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": DONE}, "stop"
    usage = {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1}
    head = {"id": _id("chatcmpl"), "model": model, "created": 0}
    if not stream:
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
    chunk = {**head, "object": "chat.completion.chunk"}
    return [
        {**chunk, "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**chunk, "choices": [], "usage": usage},
    ]
