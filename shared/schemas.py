"""Pydantic models that cross service boundaries.

OpenAI-shaped chat messages and tool calls (the model service speaks them, the orchestrator
records them), ids and statuses of the platform's long-lived objects. Service-internal models
stay in their service.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _check_id(value: str) -> str:
    if not _ID.match(value):
        raise ValueError(
            "ids are 1-64 characters of letters, digits, '_', '.', '-', starting with a letter "
            f"or digit; got {value!r}"
        )
    return value


ResourceId = Annotated[str, AfterValidator(_check_id)]
WorldId = ResourceId
SandboxId = ResourceId
EpisodeId = ResourceId
TrajectoryId = ResourceId
JobId = ResourceId


# --- OpenAI-shaped chat --------------------------------------------------------------------


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="JSON-encoded arguments, as the model produced them.")


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    """One message of a conversation in OpenAI's chat format (plus ``reasoning_content``)."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content)


class FunctionDefinition(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None


class ToolDefinition(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0


# --- sandboxes -----------------------------------------------------------------------------


class NetworkPolicy(BaseModel):
    """No network unless listed: ``allow`` holds host:port pairs the sandbox may reach."""

    mode: Literal["none", "allowlist"] = "none"
    allow: list[str] = Field(default_factory=list)


class SandboxSpec(BaseModel):
    template: str = Field("busybox", description="Image template to boot.")
    cpu: int = Field(1, ge=1, le=16)
    memory_mb: int = Field(256, ge=64, le=65536)
    timeout_s: int = Field(300, ge=0, description="Idle timeout; 0 = none.")
    metadata: dict[str, str] = Field(default_factory=dict)
    network: NetworkPolicy = Field(default_factory=NetworkPolicy)


# --- statuses ------------------------------------------------------------------------------


class SandboxStatus(StrEnum):
    creating = "creating"
    running = "running"
    paused = "paused"
    killed = "killed"
    error = "error"


class JobStatus(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"


class EpisodeStatus(StrEnum):
    pending = "pending"
    running = "running"
    paused = "paused"
    finished = "finished"
    failed = "failed"
