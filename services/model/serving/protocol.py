"""OpenAI-compatible request and response models (pydantic v2), shared by every backend.

Top-level requests reject fields they do not know (a 400 naming them: a sampling option the engine
would silently drop is worse than an error), and values they cannot honour, with a message naming
the field; nested objects (messages, tools) ignore unknown keys, since clients echo back whatever
an earlier answer carried. Text must be valid Unicode: a lone surrogate (JSON ``"\\ud800"``) is a
400 naming where it is. Responses allow extra fields, so a forwarded upstream answer keeps them.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from services.model.serving.text_guard import check_unicode

# the platform's one chat-message type, re-exported under the names the backends import
from shared.chat import ChatMessage, ContentPart, FunctionCall, ToolCall  # noqa: F401

# ----- errors ------------------------------------------------------------------------------------


class OpenAIErrorBody(BaseModel):
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


class OpenAIErrorResponse(BaseModel):
    """OpenAI's error envelope, used by every ``/v1`` route for 4xx and 5xx answers."""

    error: OpenAIErrorBody


class OpenAIError(Exception):
    """Raise from a backend or route to answer with :class:`OpenAIErrorResponse`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers
        self.status = status
        self.message = message
        self.type = type or _TYPE_BY_STATUS.get(status, "api_error")
        self.param = param
        self.code = code

    def body(self) -> OpenAIErrorResponse:
        return OpenAIErrorResponse(
            error=OpenAIErrorBody(
                message=self.message, type=self.type, param=self.param, code=self.code
            )
        )


_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
}

# ----- shared pieces ------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _TopRequest(_Request):
    """A route's body: unknown fields are an error, text must be valid Unicode."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        check_unicode(data)
        return data


class _ClientRequest(_TopRequest):
    """A vendor API's body (Messages, Responses): what its own clients send beyond the fields
    served is ignored, as the vendors' servers do, and named (:meth:`ignored_fields`) in a
    header of the answer; text must be valid Unicode."""

    model_config = ConfigDict(extra="allow")

    def ignored_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionDef(_Request):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Request):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Request):
    name: str


class NamedToolChoice(_Request):
    type: Literal["function"] = "function"
    function: NamedFunction


class JSONSchemaFormat(_Request):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_present(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type 'json_schema' needs json_schema")
        return self


class StreamOptions(_Request):
    include_usage: bool = False


class PromptTokensDetails(_Response):
    cached_tokens: int = 0


class CompletionTokensDetails(_Response):
    reasoning_tokens: int = 0


class Usage(_Response):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


MAX_N = 16
#: Tools per request, OpenAI's own cap: each is compiled into the request's grammar, and 1,000 of
#: them held the grammar compiler for seconds of CPU.
MAX_TOOLS = 128
#: Entries of ``logit_bias`` (OpenAI's own limit is 300; a bias per token of a big vocabulary is
#: what a request could otherwise send, each step).
MAX_LOGIT_BIAS = 1024
_TOKEN_ID = re.compile(r"[0-9]{1,10}")
MAX_TOP_LOGPROBS = 20
_TOKEN_IDS_DOC = (
    "k3stack extension (vLLM's name): also return the prompt's token ids (`prompt_token_ids`) "
    "and each choice's generated ids (`token_ids`); decoding them gives the text, and "
    "tokenising the text again gives the same ids."
)


class _SamplingFields(_TopRequest):
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, description="Keep the k most likely tokens (0/-1: off).")
    min_p: float | None = Field(
        None, ge=0.0, le=1.0, description="Drop tokens below min_p x the top probability."
    )
    repetition_penalty: float | None = Field(
        None, gt=0.0, le=10.0, description="Penalise tokens of the prompt and output (1: off)."
    )
    logit_bias: dict[str, float] | None = Field(
        None,
        description="Token id (as a string of ASCII digits) -> bias added to its logit, "
        "-100..100; ids past the vocabulary are a 400.",
    )
    max_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    stop: str | list[str] | None = None
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    store: bool | None = Field(None, description="Accepted; nothing is stored.")
    metadata: dict[str, str] | None = Field(None, description="Accepted and ignored.")
    service_tier: str | None = Field(None, description="Accepted and ignored.")
    return_token_ids: bool | None = Field(None, description=_TOKEN_IDS_DOC)

    @field_validator("logit_bias")
    @classmethod
    def _bias_range(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is not None and len(v) > MAX_LOGIT_BIAS:
            raise ValueError(f"at most {MAX_LOGIT_BIAS} entries")
        for key, bias in (v or {}).items():
            # str.isdigit takes '²' and '٣', and int() takes '+5' and ' 5': only ASCII digits pass
            if not _TOKEN_ID.fullmatch(key):
                raise ValueError(f"key {key[:40]!r} is not a token id (0 or more, ASCII digits)")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"bias {bias} for token {key} is outside [-100, 100]")
        return v

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> str | list[str] | None:
        items = [v] if isinstance(v, str) else (v or [])
        if len(items) > 16:
            raise ValueError("at most 16 stop sequences")
        if any(not s for s in items):
            raise ValueError("stop sequences must be non-empty")
        return v

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


def _at_most_tools(tools: list[ToolDef] | None) -> list[ToolDef] | None:
    if tools is not None and len(tools) > MAX_TOOLS:
        raise ValueError(f"at most {MAX_TOOLS} tools per request, not {len(tools)}")
    return tools


# ----- chat completions -----------------------------------------------------------------------------

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "max"]


class ChatCompletionRequest(_SamplingFields):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDef] | None = Field(None, description=f"At most {MAX_TOOLS}.")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: ReasoningEffort | None = Field(
        None,
        description="Thinking mode with this effort (minimal = low, medium, high, max); "
        "'none' = instruct mode.",
    )
    max_completion_tokens: int | None = Field(None, ge=1)
    thinking_budget_tokens: int | None = Field(
        None,
        ge=1,
        description="k3stack extension (Anthropic's thinking.budget_tokens): the most tokens "
        "the turn thinks before it answers.",
    )
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)

    @field_validator("tools")
    @classmethod
    def _tool_cap(cls, v: list[ToolDef] | None) -> list[ToolDef] | None:
        return _at_most_tools(v)

    @model_validator(mode="after")
    def _tool_choice_needs_tools(self) -> ChatCompletionRequest:
        if isinstance(self.tool_choice, NamedToolChoice) or self.tool_choice == "required":
            if not self.tools:
                raise ValueError("tool_choice needs tools")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class ChatCompletionMessage(_Response):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


_PARSE_ERRORS_DOC = (
    "k3stack extension, only when the model's output did not parse cleanly: what was wrong. "
    "What did parse is in the message; agents can turn this into an error observation."
)
_RAW_DOC = "k3stack extension, with parse_errors: the raw generated text, markers included."
_TRUNCATED_DOC = (
    "k3stack extension, only with finish_reason length: max_tokens cut a tool call or a JSON "
    "answer; its arguments or content are left as generated (not valid, not repaired)."
)
_STOP_REASON_DOC = "vLLM's extension: the stop string that ended the output, if one did."


class TopLogprob(_Response):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprobEntry(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(_Response):
    """Chat logprobs: one entry per generated token (the model's own distribution)."""

    content: list[TokenLogprobEntry] | None = None


class ChatChoice(_Response):
    index: int = 0
    message: ChatCompletionMessage
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = Field(None, description=_TOKEN_IDS_DOC)
    stop_reason: str | None = Field(None, description=_STOP_REASON_DOC)
    parse_errors: list[str] | None = Field(None, description=_PARSE_ERRORS_DOC)
    raw_output: str | None = Field(None, description=_RAW_DOC)
    truncated: bool | None = Field(None, description=_TRUNCATED_DOC)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class ChatCompletion(_Response):
    id: str = Field(default_factory=lambda: new_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    prompt_token_ids: list[int] | None = Field(None, description=_TOKEN_IDS_DOC)


class FunctionCallDelta(_Response):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(_Response):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta | None = None


class ChatDelta(_Response):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(_Response):
    index: int = 0
    delta: ChatDelta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = Field(None, description=_TOKEN_IDS_DOC)
    stop_reason: str | None = Field(None, description=_STOP_REASON_DOC)
    parse_errors: list[str] | None = Field(None, description=_PARSE_ERRORS_DOC)
    raw_output: str | None = Field(None, description=_RAW_DOC)
    truncated: bool | None = Field(None, description=_TRUNCATED_DOC)


class ChatCompletionChunk(_Response):
    #: Prompt tokens, known from the first chunk on (not sent: Anthropic's message_start reads it).
    _num_prompt_tokens: int | None = PrivateAttr(None)
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = Field(None, description=_TOKEN_IDS_DOC)


# ----- completions ------------------------------------------------------------------------------------


_COMPLETION_TOOLS_DOC = (
    "k3stack extension, for a token-id prompt that ends with the chat template's generation "
    "prefix (a token-in-token-out agent turn): the turn is decoded under the same grammar a chat "
    "completion with these fields would use; nothing is added to the prompt (no tool-choice "
    "option message), so the caller's context stays exactly its ids."
)


class CompletionRequest(_SamplingFields):
    model: str | None = None
    prompt: str | list[int] | list[str] = Field(
        description="A string (XTML markers in it become special tokens) or token ids."
    )
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    suffix: str | None = None
    tools: list[ToolDef] | None = Field(None, description=_COMPLETION_TOOLS_DOC)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description=_COMPLETION_TOOLS_DOC
    )
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _tool_choice_needs_tools(self) -> CompletionRequest:
        if isinstance(self.tool_choice, NamedToolChoice) or self.tool_choice == "required":
            if not self.tools:
                raise ValueError("tool_choice needs tools")
        return self

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, v: str | list[int] | list[str]) -> str | list[int] | list[str]:
        if isinstance(v, list) and v and isinstance(v[0], str):
            if len(v) != 1:
                raise ValueError("only one prompt per request is supported")
        if isinstance(v, list) and not v:
            raise ValueError("prompt must not be empty")
        return v

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, v: str | None) -> str | None:
        if v:
            raise ValueError("suffix is not supported")
        return v


class CompletionLogprobs(_Response):
    """Completions' logprobs: parallel lists over the generated tokens."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(_Response):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: CompletionLogprobs | None = None
    token_ids: list[int] | None = Field(None, description=_TOKEN_IDS_DOC)
    stop_reason: str | None = Field(None, description=_STOP_REASON_DOC)


class Completion(_Response):
    id: str = Field(default_factory=lambda: new_id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = Field(None, description=_TOKEN_IDS_DOC)


# ----- models and tokenize ----------------------------------------------------------------------------------


class ModelCard(_Response):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "k3stack"
    max_model_len: int | None = None


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeRequest(_TopRequest):
    """Either ``prompt`` (raw text) or ``messages`` (rendered through the chat template).

    ``messages`` (with ``tools`` and ``reasoning_effort``) renders exactly the prompt a chat
    completion with the same fields would run, so its ``count`` is the context a caller spends.
    """

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[ToolDef] | None = Field(None, description=f"At most {MAX_TOOLS}.")
    reasoning_effort: ReasoningEffort | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = Field(
        True, description="For prompt: turn XTML marker text into special tokens."
    )
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    response_format: ResponseFormat | None = None

    @field_validator("tools")
    @classmethod
    def _tool_cap(cls, v: list[ToolDef] | None) -> list[ToolDef] | None:
        return _at_most_tools(v)

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        return self


class TokenizeResponse(_Response):
    tokens: list[int]
    count: int
    max_model_len: int | None = None
    text: str | None = Field(None, description="The rendered prompt (for messages).")


class DetokenizeRequest(_TopRequest):
    model: str | None = None
    tokens: list[int] = Field(description="Token ids to turn back into text.")
    skip_special_tokens: bool = False


class DetokenizeResponse(_Response):
    prompt: str


def chat_request(body: dict[str, Any]) -> ChatCompletionRequest:
    """A chat request built from a translated body (Responses, Messages, token counting);
    invalid fields are a 400 listing each ``field: problem``."""
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise OpenAIError(400, f"invalid request: {problems}") from None
