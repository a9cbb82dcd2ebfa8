"""The ``reference`` backend: the project's own K3 engine, XTML template and parser."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from services.model.serving.backends.base import Backend
from services.model.serving.engine import Engine, EngineError, EngineOutput, RequestStream
from services.model.serving.parser import (
    ContentDelta,
    Event,
    ParsedMessage,
    ReasoningDelta,
    StreamParser,
    ToolCallArgsDelta,
    ToolCallStart,
)
from services.model.serving.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionRequest,
    ChatDelta,
    Completion,
    CompletionChoice,
    CompletionRequest,
    CompletionTokensDetails,
    FunctionCall,
    FunctionCallDelta,
    ModelCard,
    OpenAIError,
    PromptTokensDetails,
    TokenizeRequest,
    TokenizeResponse,
    ToolCall,
    ToolCallDelta,
    Usage,
    new_id,
)
from services.model.serving.sampling import SamplingParams
from services.model.serving.template import Rendered, TemplateError, render_chat
from services.model.tokenizer.base import END_OF_MSG, Tokenizer, TokenizerError

log = logging.getLogger("k3stack.model.reference")

DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0


def _usage(out: EngineOutput | None, reasoning_tokens: int = 0) -> Usage:
    prompt = out.num_prompt_tokens if out else 0
    completion = out.num_output_tokens if out else 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=out.num_cached_tokens if out else 0
        ),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=reasoning_tokens),
    )


def _finish_reason(reason: str | None, parsed: ParsedMessage | None) -> str:
    if reason == "stop" and parsed is not None and parsed.tool_calls:
        return "tool_calls"
    return reason or "stop"


def _events_to_deltas(events: list[Event]) -> list[ChatDelta]:
    """Group parser events into as few chunk deltas as keep their order."""
    deltas: list[ChatDelta] = []
    for ev in events:
        last = deltas[-1] if deltas else None
        if isinstance(ev, ReasoningDelta):
            if last is not None and last.reasoning_content is not None and last.content is None:
                last.reasoning_content += ev.text
            else:
                deltas.append(ChatDelta(reasoning_content=ev.text))
        elif isinstance(ev, ContentDelta):
            if last is not None and last.content is not None and last.tool_calls is None:
                last.content += ev.text
            else:
                deltas.append(ChatDelta(content=ev.text))
        elif isinstance(ev, ToolCallStart):
            deltas.append(
                ChatDelta(
                    tool_calls=[
                        ToolCallDelta(
                            index=ev.index,
                            id=ev.id,
                            type="function",
                            function=FunctionCallDelta(name=ev.name, arguments=""),
                        )
                    ]
                )
            )
        elif isinstance(ev, ToolCallArgsDelta):
            calls = last.tool_calls if last is not None else None
            if calls and calls[-1].index == ev.index and calls[-1].function is not None:
                calls[-1].function.arguments = (calls[-1].function.arguments or "") + ev.text
            else:
                deltas.append(
                    ChatDelta(
                        tool_calls=[
                            ToolCallDelta(
                                index=ev.index, function=FunctionCallDelta(arguments=ev.text)
                            )
                        ]
                    )
                )
    return deltas


class ReferenceBackend(Backend):
    """Serves a :class:`~services.model.serving.engine.Engine` built from a model runner."""

    name = "reference"

    def __init__(
        self,
        served_model_name: str,
        *,
        tokenizer: Tokenizer,
        engine_factory: Any,
        default_max_tokens: int = 0,
    ) -> None:
        """``engine_factory()`` builds the :class:`Engine` (the model loads in :meth:`start`)."""
        super().__init__(served_model_name)
        self.tokenizer = tokenizer
        self._engine_factory = engine_factory
        self.engine: Engine | None = None
        self.default_max_tokens = default_max_tokens

    async def start(self) -> None:
        started = time.monotonic()
        log.info("loading the reference engine...")
        self.engine = await asyncio.to_thread(self._engine_factory)
        self.engine.start()
        log.info("reference engine ready in %.1fs", time.monotonic() - started)

    async def stop(self) -> None:
        if self.engine is not None:
            await asyncio.to_thread(self.engine.stop)

    def models(self) -> list[ModelCard]:
        card = super().models()[0]
        card.max_model_len = self.engine.max_model_len if self.engine else None
        return [card]

    def health(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.name, "ready": self.engine is not None}
        if self.engine is not None:
            out.update(self.engine.snapshot())
        return out

    # -- helpers -----------------------------------------------------------------------------------

    def _engine(self) -> Engine:
        if self.engine is None:
            raise OpenAIError(503, "the model is still loading", code="not_ready")
        return self.engine

    def _render(
        self, req: ChatCompletionRequest, *, add_generation_prompt: bool = True
    ) -> Rendered:
        effort = req.reasoning_effort
        try:
            return render_chat(
                [m.model_dump(exclude_none=True) for m in req.messages],
                tools=[t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None,
                tool_choice=(
                    req.tool_choice.model_dump()
                    if req.tool_choice is not None and not isinstance(req.tool_choice, str)
                    else req.tool_choice
                ),
                response_format=(
                    req.response_format.model_dump(by_alias=True, exclude_none=True)
                    if req.response_format
                    else None
                ),
                reasoning_effort=None if effort in (None, "none") else effort,
                thinking=effort != "none",
                add_generation_prompt=add_generation_prompt,
                parallel_tool_calls=req.parallel_tool_calls,
            )
        except TemplateError as exc:
            raise OpenAIError(400, str(exc), param=str(exc).split(":", 1)[0]) from exc

    def _params(self, req: ChatCompletionRequest | CompletionRequest, stop_ids: list[int]):
        max_tokens = (
            req.effective_max_tokens() if isinstance(req, ChatCompletionRequest) else req.max_tokens
        )
        if max_tokens is None and self.default_max_tokens:
            engine = self._engine()
            max_tokens = self.default_max_tokens
            max_tokens = max(1, min(max_tokens, engine.max_model_len - 1))
        return SamplingParams(
            max_tokens=max_tokens,  # type: ignore[arg-type]  # None: engine fills to context
            temperature=DEFAULT_TEMPERATURE if req.temperature is None else req.temperature,
            top_p=DEFAULT_TOP_P if req.top_p is None else req.top_p,
            seed=req.seed,
            stop=req.stop_list(),
            stop_token_ids=stop_ids,
            frequency_penalty=req.frequency_penalty,
            presence_penalty=req.presence_penalty,
        )

    def _start(self, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        engine = self._engine()
        try:
            return engine.stream(prompt_ids, params)
        except EngineError as exc:
            raise OpenAIError(400, str(exc), param=exc.param, code=exc.code) from exc

    def _chat_prompt(self, req: ChatCompletionRequest) -> tuple[Rendered, list[int], list[int]]:
        if not self.tokenizer.has_xtml():
            raise OpenAIError(
                500,
                f"the tokenizer {self.tokenizer.name!r} lacks the XTML tokens; chat is "
                "unavailable (use /v1/completions)",
                code="template_unavailable",
            )
        rendered = self._render(req)
        try:
            ids = rendered.token_ids(self.tokenizer)
        except TokenizerError as exc:
            raise OpenAIError(500, str(exc)) from exc
        return rendered, ids, [self.tokenizer.special_id(END_OF_MSG)]

    # -- chat -------------------------------------------------------------------------------------

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletion:
        rendered, ids, stop_ids = self._chat_prompt(req)
        stream = self._start(ids, self._params(req, stop_ids))
        parser = StreamParser(rendered.mode)
        last: EngineOutput | None = None
        reasoning_tokens = 0
        try:
            async for out in stream:
                if parser.channel == "think":
                    reasoning_tokens += len(out.token_ids)
                parser.feed_many(out.pieces)
                last = out
        finally:
            await stream.aclose()
        parser.finish()
        parsed = parser.result()
        if last is not None and last.error:
            raise OpenAIError(500, last.error, type="server_error", code="engine_error")
        if parsed.errors:
            log.info("model output did not parse cleanly: %s", "; ".join(parsed.errors[:5]))
        message = ChatCompletionMessage(
            content=parsed.content,
            reasoning_content=parsed.reasoning_content,
            tool_calls=[
                ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                for c in parsed.tool_calls
            ]
            or None,
        )
        return ChatCompletion(
            model=self.served_model_name,
            choices=[
                ChatChoice(
                    message=message,
                    finish_reason=_finish_reason(last.finish_reason if last else None, parsed),
                    parse_errors=parsed.errors or None,
                    raw_output=parsed.raw if parsed.errors else None,
                )
            ],
            usage=_usage(last, reasoning_tokens),
        )

    async def chat_stream(self, req: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        rendered, ids, stop_ids = self._chat_prompt(req)
        stream = self._start(ids, self._params(req, stop_ids))
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        chunk_id, created = new_id("chatcmpl"), int(time.time())

        def chunk(
            delta: ChatDelta, finish: str | None = None, parsed: ParsedMessage | None = None
        ) -> ChatCompletionChunk:
            errors = parsed.errors if parsed is not None else []
            return ChatCompletionChunk(
                id=chunk_id,
                created=created,
                model=self.served_model_name,
                choices=[
                    ChatChunkChoice(
                        delta=delta,
                        finish_reason=finish,
                        parse_errors=errors or None,
                        raw_output=parsed.raw if errors and parsed is not None else None,
                    )
                ],
            )

        parser = StreamParser(rendered.mode)
        last: EngineOutput | None = None
        reasoning_tokens = 0
        try:
            yield chunk(ChatDelta(role="assistant", content=""))
            async for out in stream:
                last = out
                if parser.channel == "think":
                    reasoning_tokens += len(out.token_ids)
                events = parser.feed_many(out.pieces)
                if out.finished:
                    events += parser.finish()
                for delta in _events_to_deltas(events):
                    yield chunk(delta)
            if last is not None and last.error:
                raise OpenAIError(500, last.error, type="server_error", code="engine_error")
            parsed = parser.result()
            yield chunk(
                ChatDelta(), _finish_reason(last.finish_reason if last else None, parsed), parsed
            )
            if include_usage:
                yield ChatCompletionChunk(
                    id=chunk_id,
                    created=created,
                    model=self.served_model_name,
                    choices=[],
                    usage=_usage(last, reasoning_tokens),
                )
        finally:
            await stream.aclose()

    # -- completions --------------------------------------------------------------------------------

    def _completion_prompt(self, req: CompletionRequest) -> tuple[list[int], str]:
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, allow_special=True), prompt
        ids = [int(t) for t in prompt]  # type: ignore[union-attr]
        return ids, self.tokenizer.decode(ids)

    def _completion_stop_ids(self) -> list[int]:
        return [
            self.tokenizer.special_tokens[t]
            for t in (END_OF_MSG, "[EOS]")
            if t in self.tokenizer.special_tokens
        ]

    async def completion(self, req: CompletionRequest) -> Completion:
        ids, prompt_text = self._completion_prompt(req)
        stream = self._start(ids, self._params(req, self._completion_stop_ids()))
        parts: list[str] = [prompt_text] if req.echo else []
        last: EngineOutput | None = None
        try:
            async for out in stream:
                parts.extend(p.text for p in out.pieces)
                last = out
        finally:
            await stream.aclose()
        if last is not None and last.error:
            raise OpenAIError(500, last.error, type="server_error", code="engine_error")
        return Completion(
            model=self.served_model_name,
            choices=[
                CompletionChoice(
                    text="".join(parts), finish_reason=last.finish_reason if last else "stop"
                )
            ],
            usage=_usage(last),
        )

    async def completion_stream(self, req: CompletionRequest) -> AsyncIterator[Completion]:
        ids, prompt_text = self._completion_prompt(req)
        stream = self._start(ids, self._params(req, self._completion_stop_ids()))
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        cid, created = new_id("cmpl"), int(time.time())

        def chunk(text: str, finish: str | None = None) -> Completion:
            return Completion(
                id=cid,
                created=created,
                model=self.served_model_name,
                choices=[CompletionChoice(text=text, finish_reason=finish)],
            )

        last: EngineOutput | None = None
        try:
            yield chunk(prompt_text if req.echo else "")
            async for out in stream:
                last = out
                text = "".join(p.text for p in out.pieces)
                if out.finished:
                    if out.error:
                        raise OpenAIError(500, out.error, type="server_error", code="engine_error")
                    yield chunk(text, out.finish_reason)
                elif text:
                    yield chunk(text)
            if include_usage:
                yield Completion(
                    id=cid, created=created, model=self.served_model_name, choices=[],
                    usage=_usage(last),
                )  # fmt: skip
        finally:
            await stream.aclose()

    # -- tokenize ------------------------------------------------------------------------------------

    async def tokenize(self, req: TokenizeRequest) -> TokenizeResponse:
        engine_len = self.engine.max_model_len if self.engine else None
        if req.prompt is not None:
            ids = self.tokenizer.encode(req.prompt, allow_special=req.add_special_tokens)
            return TokenizeResponse(tokens=ids, count=len(ids), max_model_len=engine_len)
        chat = ChatCompletionRequest(
            messages=req.messages or [],
            tools=req.tools,
            reasoning_effort=req.reasoning_effort,
        )
        rendered = self._render(chat, add_generation_prompt=req.add_generation_prompt)
        ids = rendered.token_ids(self.tokenizer)
        return TokenizeResponse(
            tokens=ids, count=len(ids), max_model_len=engine_len, text=rendered.text
        )
