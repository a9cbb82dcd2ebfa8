"""Token counting for compaction triggers.

``ModelTokenCounter`` asks the model service (``POST /v1/tokenize`` with the messages and tools,
rendered through the model's chat template), so a trigger fires on the model's own count.
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


class ModelTokenCounter:
    """Counts through the model service's tokenizer (chat template included)."""

    name = "model-tokenizer"

    def __init__(self, model_client: Any) -> None:
        self.client = model_client

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        return int(self.client.post_json("/v1/tokenize", body)["count"])
