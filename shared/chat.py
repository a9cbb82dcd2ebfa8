"""The platform's one chat-message type: OpenAI's chat format plus ``reasoning_content``.

The model service accepts it, the orchestrator records it in trajectories, judges and NPCs send
it. Fields and rules are OpenAI's: a ``tool`` message answers one ``tool_call_id``; system,
developer and user messages carry content; tool-call arguments are the JSON *string* the model
produced (it may not parse — that is for the caller to judge). Unknown message fields are
dropped (clients send many optional ones); content parts keep theirs (``image_url`` …).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Role = Literal["system", "developer", "user", "assistant", "tool"]


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    arguments: str = Field("{}", description="JSON-encoded arguments, as the model produced them.")


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(BaseModel):
    """One part of a multi-part content (``{"type": "text", "text": …}``, ``image_url`` …)."""

    model_config = ConfigDict(extra="allow")

    type: str = "text"
    text: str | None = None


class ChatMessage(BaseModel):
    """One message of a conversation."""

    model_config = ConfigDict(extra="ignore")

    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _check_role_fields(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a 'tool' message needs tool_call_id")
        if self.role in ("system", "developer", "user") and self.content is None:
            raise ValueError(f"a {self.role!r} message needs content")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an 'assistant' message carries tool_calls")
        return self

    def text(self) -> str:
        """The content as plain text (text parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content)


class FunctionDefinition(BaseModel):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(BaseModel):
    """A tool offered to the model (``tools=[…]`` of a chat request)."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class PromptTokensDetails(BaseModel):
    model_config = ConfigDict(extra="allow")

    cached_tokens: int = 0


class CompletionTokensDetails(BaseModel):
    model_config = ConfigDict(extra="allow")

    reasoning_tokens: int = 0


class Usage(BaseModel):
    """Token counts as the model service reports them (OpenAI's shape: cached prompt tokens
    under ``prompt_tokens_details.cached_tokens``, counted inside ``prompt_tokens``)."""

    model_config = ConfigDict(extra="allow")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None

    @property
    def cached_tokens(self) -> int:
        return self.prompt_tokens_details.cached_tokens if self.prompt_tokens_details else 0
