"""Wire models of the model service's answers, as its typed client returns them.

Field for field the service's own response models (``services/model/serving/protocol.py``,
OpenAI's shapes plus k3stack's documented extensions); they allow extra fields, so an answer
carrying a newer extension still parses and keeps it (``answer.model_extra``). Messages, tool
calls and usage are the platform's one chat type (:mod:`shared.chat`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.chat import ChatMessage, ToolCall, Usage

__all__ = [
    "ChatChoice",
    "ChatCompletion",
    "ChatCompletionMessage",
    "Completion",
    "CompletionChoice",
    "ModelCard",
    "ModelList",
    "TokenizeResult",
]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatCompletionMessage(_Answer):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None

    def as_message(self) -> ChatMessage:
        """The answer as the message to append to the conversation."""
        return ChatMessage.model_validate(self.model_dump(exclude_none=True))


class ChatChoice(_Answer):
    index: int = 0
    message: ChatCompletionMessage
    finish_reason: str | None = None
    parse_errors: list[str] | None = None
    raw_output: str | None = None


class ChatCompletion(_Answer):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class CompletionChoice(_Answer):
    index: int = 0
    text: str
    finish_reason: str | None = None


class Completion(_Answer):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(_Answer):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "k3stack"
    max_model_len: int | None = None


class ModelList(_Answer):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeResult(_Answer):
    tokens: list[int]
    count: int
    max_model_len: int | None = None
    text: str | None = None
