"""Token counting for compaction triggers.

``ModelTokenCounter`` asks the model service (``POST /v1/tokenize``, rendered through the model's
chat template) once per message and once for the tool schemas, so a trigger fires on the
model's own count without a request per count.
``ApproxTokenCounter`` (4 characters a token) is the stand-in for endpoints that cannot count,
named as such in the trajectory.
"""

from __future__ import annotations

import json
from typing import Any, Protocol


class TokenCounter(Protocol):
    name: str

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int: ...


class ApproxTokenCounter:
    """Sizes are memoised per message object (messages are never edited in place once in the
    context; compaction builds new ones), so counting a growing context stays cheap."""

    name = "approx-4-chars"

    def __init__(self) -> None:
        self._sizes: dict[int, tuple[Any, int]] = {}

    def _size(self, value: Any) -> int:
        hit = self._sizes.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        n = len(json.dumps(value, ensure_ascii=False))
        self._sizes[id(value)] = (value, n)
        return n

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        size = sum(self._size(m) for m in messages)
        size += len(json.dumps(tools)) if tools else 0
        return size // 4 + 1


_EMPTY = {"role": "user", "content": ""}
_STUB_CALL = {
    "role": "assistant", "content": "",
    "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}  # fmt: skip


class ModelTokenCounter:
    """Counts with the model service's tokenizer (chat template included), each message once.

    A context's count is the fixed part (the tool schemas and the template's framing, measured
    once) plus each message's own tokens, memoised per message object like the approximation:
    a growing context costs one tokenizer call per new message, and the many counts inside a
    compaction (sizing the tail unit by unit, re-counting after each cut) cost none for the
    messages already seen. ``calls`` says how many requests were made.
    """

    name = "model-tokenizer"

    def __init__(self, model_client: Any) -> None:
        self.client = model_client
        self._sizes: dict[int, tuple[Any, int]] = {}
        self._fixed: dict[str, int] = {}
        self.calls = 0

    def _tokenize(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        self.calls += 1
        return int(self.client.post_json("/v1/tokenize", body)["count"])

    def _framing(self, tools: list[dict[str, Any]]) -> int:
        """Tokens of a one empty message conversation with these tools (the schemas, the
        template's framing); a slight overcount, never an under-count."""
        key = json.dumps(tools, sort_keys=True) if tools else ""
        if key not in self._fixed:
            self._fixed[key] = self._tokenize([_EMPTY], tools)
        return self._fixed[key]

    def _size(self, message: dict[str, Any]) -> int:
        hit = self._sizes.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        if message.get("role") == "tool":  # a result needs its call before it: a stub call
            if "stub" not in self._fixed:
                self._fixed["stub"] = self._tokenize([_EMPTY, _STUB_CALL], [])
            result = {**message, "tool_call_id": "call_0"}
            n = max(0, self._tokenize([_EMPTY, _STUB_CALL, result], []) - self._fixed["stub"])
        else:
            n = max(0, self._tokenize([_EMPTY, message], []) - self._framing([]))
        self._sizes[id(message)] = (message, n)
        return n

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return self._framing(tools) + sum(self._size(m) for m in messages)
