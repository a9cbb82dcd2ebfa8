"""The ``reference`` backend: the project's own K3 engine, XTML template and parser."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from services.model.serving.backends.base import Backend
from services.model.serving.backends.tasks import gather_choices, merge
from services.model.serving.engine import Engine, EngineError, EngineOutput, RequestStream
from services.model.serving.metrics import RequestMetrics
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
    ChoiceLogprobs,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionTokensDetails,
    DetokenizeRequest,
    DetokenizeResponse,
    FunctionCall,
    FunctionCallDelta,
    ModelCard,
    OpenAIError,
    PromptTokensDetails,
    TokenizeRequest,
    TokenizeResponse,
    TokenLogprobEntry,
    ToolCall,
    ToolCallDelta,
    TopLogprob,
    Usage,
    chat_request,
    new_id,
)
from services.model.serving.sampling import LogitsProcessor, SamplingParams, TokenLogprob
from services.model.serving.structured import (
    Constraint,
    StructuredOutputError,
    chat_constraint,
    completion_constraint,
    thinking_cap,
)
from services.model.serving.template import Rendered, TemplateError, render_chat
from services.model.serving.tokenize_pool import TokenizePool, approx_chars, count_upto
from services.model.tokenizer.base import END_OF_MSG, Tokenizer, TokenizerError

log = logging.getLogger("k3stack.model.reference")

DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0


SEED_SPACE = 2**64
EFFORT_ALIASES = {"minimal": "low"}


def _usage(outs: list[EngineOutput | None], reasoning_tokens: int = 0) -> Usage:
    """Usage of one prompt's choices: the prompt counted once, the completions summed."""
    first = next((o for o in outs if o is not None), None)
    prompt = first.num_prompt_tokens if first else 0
    completion = sum(o.num_output_tokens for o in outs if o is not None)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=first.num_cached_tokens if first else 0
        ),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=reasoning_tokens),
    )


@dataclass
class _Prompt:
    """A request's prompt, rendered and tokenised off the event loop."""

    ids: list[int]
    stop_ids: list[int]
    rendered: Rendered | None = None
    text: str = ""
    constraint: Constraint | None = None
    tokenizer: Tokenizer | None = None


@dataclass
class _Run:
    """What one choice produced."""

    last: EngineOutput | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0


def _finish_reason(reason: str | None, parsed: ParsedMessage | None) -> str:
    if reason == "stop" and parsed is not None and parsed.tool_calls:
        return "tool_calls"
    return reason or "stop"


def _truncated(reason: str | None, parser: StreamParser, prompt: _Prompt) -> bool:
    """max_tokens cut a tool call, or a constrained JSON answer, before it closed."""
    if reason != "length":
        return False
    return parser.truncated or bool(prompt.constraint and prompt.constraint.json_format)


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
        self.metrics: RequestMetrics | None = None
        self.tokenize_pool = TokenizePool()

    async def start(self) -> None:
        started = time.monotonic()
        log.info("loading the reference engine...")
        self.engine = await asyncio.to_thread(self._engine_factory)
        self.engine.start()
        log.info("reference engine ready in %.1fs", time.monotonic() - started)

    async def stop(self) -> None:
        if self.engine is not None:
            await asyncio.to_thread(self.engine.stop)
        self.tokenize_pool.shutdown()

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

    @cached_property
    def max_token_bytes(self) -> int:
        """The longest byte string one ordinary token stands for."""
        tok = self.tokenizer
        return max(
            (len(tok.token_bytes(i)) for i in range(tok.vocab_size) if not tok.is_special(i)),
            default=1,
        )

    def _check_length(
        self,
        segments: list[tuple[str, bool]],
        param: str,
        cancel: threading.Event | None,
        *,
        allow_special: bool = False,
    ) -> None:
        """Refuse a prompt that cannot fit the context before tokenising all of it: first by its
        UTF-8 bytes (every ordinary token stands for at most ``max_token_bytes`` of them), then
        by a count that stops once past the context (:func:`count_upto`)."""
        if self.engine is None:
            return
        limit = self.engine.max_model_len
        size = sum(len(text.encode("utf-8", "surrogatepass")) for text, _ in segments)
        if size > limit * self.max_token_bytes:
            counted = (
                f"{size} UTF-8 bytes, more than {limit} tokens of {self.max_token_bytes} bytes"
            )
        else:
            n = count_upto(self.tokenizer, segments, limit, cancel, allow_special=allow_special)
            if n <= limit:
                return
            counted = f"more than {n - 1} tokens"
        raise OpenAIError(
            400,
            f"this model's maximum context length is {limit} tokens; the {param} has {counted}",
            param=param,
            code="context_length_exceeded",
        )

    def _render(
        self, req: ChatCompletionRequest, *, add_generation_prompt: bool = True
    ) -> Rendered:
        effort = EFFORT_ALIASES.get(req.reasoning_effort or "", req.reasoning_effort)
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

    def _params(
        self,
        req: ChatCompletionRequest | CompletionRequest,
        stop_ids: list[int],
        *,
        logprobs: int | None,
        index: int = 0,
        processor: LogitsProcessor | None = None,
    ) -> SamplingParams:
        max_tokens = (
            req.effective_max_tokens() if isinstance(req, ChatCompletionRequest) else req.max_tokens
        )
        if max_tokens is None and self.default_max_tokens:
            engine = self._engine()
            max_tokens = self.default_max_tokens
            max_tokens = max(1, min(max_tokens, engine.max_model_len - 1))
        bias: dict[int, float] = {}
        vocab = self._engine().vocab_limit
        for key, value in (req.logit_bias or {}).items():
            tid = int(key)
            if not 0 <= tid < vocab:
                raise OpenAIError(
                    400, f"logit_bias: token id {tid} is not in [0, {vocab})", param="logit_bias"
                )
            bias[tid] = value
        return SamplingParams(
            max_tokens=max_tokens,  # type: ignore[arg-type]  # None: engine fills to context
            temperature=DEFAULT_TEMPERATURE if req.temperature is None else req.temperature,
            top_p=DEFAULT_TOP_P if req.top_p is None else req.top_p,
            top_k=max(0, req.top_k or 0),
            min_p=req.min_p or 0.0,
            repetition_penalty=req.repetition_penalty or 1.0,
            logit_bias=bias,
            seed=None if req.seed is None else (req.seed + index) % SEED_SPACE,
            stop=req.stop_list(),
            stop_token_ids=stop_ids,
            frequency_penalty=req.frequency_penalty,
            presence_penalty=req.presence_penalty,
            logprobs=logprobs,
            logits_processor=processor,
        )

    def _start(self, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        engine = self._engine()
        try:
            return engine.stream(prompt_ids, params)
        except EngineError as exc:
            raise OpenAIError(
                exc.status,
                str(exc),
                param=exc.param,
                code=exc.code,
                headers={"Retry-After": "1"} if exc.status == 429 else None,
            ) from exc

    async def _start_all(
        self, prompt_ids: list[int], params: list[SamplingParams]
    ) -> list[RequestStream]:
        """Submit every choice, or none: if one is refused (e.g. 429), abort those already in."""
        streams: list[RequestStream] = []
        try:
            for p in params:
                streams.append(self._start(prompt_ids, p))
        except BaseException:
            for stream in streams:
                await stream.aclose()
            raise
        return streams

    async def _outputs(self, stream: RequestStream) -> AsyncIterator[EngineOutput]:
        """The stream's outputs, timed for ``/metrics``; closes it however the caller stops."""
        started = time.monotonic()
        last_at: float | None = None
        try:
            async for out in stream:
                now = time.monotonic()
                if self.metrics is not None and out.token_ids:
                    if last_at is None:
                        self.metrics.ttft.observe(now - started)
                    else:
                        self.metrics.inter_token.observe(now - last_at)
                    last_at = now
                if out.finished and self.metrics is not None:
                    self.metrics.e2e.observe(now - started)
                    if out.queue_time_s is not None:
                        self.metrics.queue_time.observe(out.queue_time_s)
                    self.metrics.finished.labels(reason=out.finish_reason or "stop").inc()
                yield out
        finally:
            await stream.aclose()

    def _chat_prompt_sync(
        self, req: ChatCompletionRequest, cancel: threading.Event | None = None
    ) -> _Prompt:
        if not self.tokenizer.has_xtml():
            raise OpenAIError(
                500,
                f"the tokenizer {self.tokenizer.name!r} lacks the XTML tokens; chat is "
                "unavailable (use /v1/completions)",
                code="template_unavailable",
            )
        rendered = self._render(req)
        self._check_length(rendered.segments, "messages", cancel)
        try:
            ids = rendered.token_ids(self.tokenizer)
        except TokenizerError as exc:
            raise OpenAIError(500, str(exc)) from exc
        try:
            constraint = chat_constraint(req, rendered.mode, self.tokenizer, cancel)
        except StructuredOutputError as exc:
            raise OpenAIError(400, str(exc), param=exc.param) from exc
        stop_ids = [self.tokenizer.special_id(END_OF_MSG)]
        return _Prompt(ids, stop_ids, rendered, rendered.text, constraint, self.tokenizer)

    async def _chat_prompt(self, req: ChatCompletionRequest) -> _Prompt:
        chars = approx_chars([req.messages, req.tools])
        return await self.tokenize_pool.run(self._chat_prompt_sync, req, chars=chars)

    @staticmethod
    def _processor(req: ChatCompletionRequest, prompt: _Prompt) -> LogitsProcessor | None:
        """A fresh matcher of the grammar enforcing ``tool_choice`` / ``response_format``."""
        if prompt.constraint is not None:
            return prompt.constraint.processor()
        if req.thinking_budget_tokens is not None and prompt.rendered is not None:
            return thinking_cap(req, prompt.rendered.mode, prompt.tokenizer)
        return None

    def _token_entry(self, lp: TokenLogprob) -> TokenLogprobEntry:
        def top(tid: int, value: float) -> TopLogprob:
            raw = self.tokenizer.token_bytes(tid)
            return TopLogprob(
                token=raw.decode("utf-8", errors="replace"), logprob=value, bytes=list(raw)
            )

        head = top(lp.token_id, lp.logprob)
        return TokenLogprobEntry(**head.model_dump(), top_logprobs=[top(t, v) for t, v in lp.top])

    # -- chat -------------------------------------------------------------------------------------

    def _chat_logprobs(self, req: ChatCompletionRequest) -> int | None:
        return (req.top_logprobs or 0) if req.logprobs else None

    async def _chat_choice(
        self, req: ChatCompletionRequest, prompt: _Prompt, index: int
    ) -> tuple[ChatChoice, _Run]:
        assert prompt.rendered is not None
        params = self._params(
            req,
            prompt.stop_ids,
            logprobs=self._chat_logprobs(req),
            index=index,
            processor=self._processor(req, prompt),
        )
        stream = self._start(prompt.ids, params)
        parser = StreamParser(prompt.rendered.mode)
        run = _Run()
        async for out in self._outputs(stream):
            parser.feed_many(out.pieces)
            if parser.thinking:
                run.reasoning_tokens += len(out.token_ids)
            run.token_ids += out.token_ids
            run.logprobs += out.logprobs
            run.last = out
        reason = run.last.finish_reason if run.last else None
        parser.finish(cut=reason == "length")
        parsed = parser.result()
        if run.last is not None and run.last.error:
            raise OpenAIError(500, run.last.error, type="server_error", code="engine_error")
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
        choice = ChatChoice(
            index=index,
            message=message,
            finish_reason=_finish_reason(run.last.finish_reason if run.last else None, parsed),
            parse_errors=parsed.errors or None,
            raw_output=parsed.raw if parsed.errors else None,
            logprobs=(
                ChoiceLogprobs(content=[self._token_entry(lp) for lp in run.logprobs])
                if req.logprobs
                else None
            ),
            token_ids=run.token_ids if req.return_token_ids else None,
            stop_reason=run.last.stop_string if run.last else None,
            truncated=_truncated(reason, parser, prompt) or None,
        )
        return choice, run

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletion:
        prompt = await self._chat_prompt(req)
        results = await gather_choices([self._chat_choice(req, prompt, i) for i in range(req.n)])
        runs = [r for _, r in results]
        return ChatCompletion(
            model=self.served_model_name,
            choices=[c for c, _ in results],
            usage=_usage([r.last for r in runs], sum(r.reasoning_tokens for r in runs)),
            prompt_token_ids=prompt.ids if req.return_token_ids else None,
        )

    async def chat_stream(self, req: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        prompt = await self._chat_prompt(req)
        assert prompt.rendered is not None
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        chunk_id, created = new_id("chatcmpl"), int(time.time())
        runs = [_Run() for _ in range(req.n)]
        # Submit every choice now, so request errors still answer 400 before the first chunk.
        streams = await self._start_all(
            prompt.ids,
            [
                self._params(
                    req,
                    prompt.stop_ids,
                    logprobs=self._chat_logprobs(req),
                    index=i,
                    processor=self._processor(req, prompt),
                )
                for i in range(req.n)
            ],
        )

        def chunk(choice: ChatChunkChoice, first: bool = False) -> ChatCompletionChunk:
            out = ChatCompletionChunk(
                id=chunk_id,
                created=created,
                model=self.served_model_name,
                choices=[choice],
                prompt_token_ids=prompt.ids if first and req.return_token_ids else None,
            )
            out._num_prompt_tokens = len(prompt.ids)
            return out

        async def one(index: int) -> AsyncIterator[ChatCompletionChunk]:
            assert prompt.rendered is not None
            run = runs[index]
            parser = StreamParser(prompt.rendered.mode)
            yield chunk(
                ChatChunkChoice(index=index, delta=ChatDelta(role="assistant", content="")),
                first=index == 0,
            )
            async for out in self._outputs(streams[index]):
                run.last = out
                events = parser.feed_many(out.pieces)
                if parser.thinking:
                    run.reasoning_tokens += len(out.token_ids)
                if out.finished:
                    events += parser.finish(cut=out.finish_reason == "length")
                deltas = _events_to_deltas(events)
                extra: dict[str, Any] = {}
                if req.logprobs and out.logprobs:
                    extra["logprobs"] = ChoiceLogprobs(
                        content=[self._token_entry(lp) for lp in out.logprobs]
                    )
                if req.return_token_ids and out.token_ids:
                    extra["token_ids"] = out.token_ids
                if extra and not deltas:
                    deltas = [ChatDelta()]
                for i, delta in enumerate(deltas):
                    yield chunk(
                        ChatChunkChoice(index=index, delta=delta, **(extra if i == 0 else {}))
                    )
            if run.last is not None and run.last.error:
                raise OpenAIError(500, run.last.error, type="server_error", code="engine_error")
            parsed = parser.result()
            errors = parsed.errors
            yield chunk(
                ChatChunkChoice(
                    index=index,
                    delta=ChatDelta(),
                    finish_reason=_finish_reason(
                        run.last.finish_reason if run.last else None, parsed
                    ),
                    parse_errors=errors or None,
                    raw_output=parsed.raw if errors else None,
                    stop_reason=run.last.stop_string if run.last else None,
                    truncated=_truncated(
                        run.last.finish_reason if run.last else None, parser, prompt
                    )
                    or None,
                )
            )

        try:
            async for item in merge([one(i) for i in range(req.n)]):
                yield item
        finally:
            for stream in streams:  # idempotent; covers choices whose task never started
                await stream.aclose()
        if include_usage:
            yield ChatCompletionChunk(
                id=chunk_id,
                created=created,
                model=self.served_model_name,
                choices=[],
                usage=_usage([r.last for r in runs], sum(r.reasoning_tokens for r in runs)),
            )

    # -- completions --------------------------------------------------------------------------------

    def _completion_prompt_sync(
        self, req: CompletionRequest, cancel: threading.Event | None = None
    ) -> _Prompt:
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        stop_ids = [
            self.tokenizer.special_tokens[t]
            for t in (END_OF_MSG, "[EOS]")
            if t in self.tokenizer.special_tokens
        ]
        if isinstance(prompt, str):
            self._check_length([(prompt, False)], "prompt", cancel, allow_special=True)
            return _Prompt(self.tokenizer.encode(prompt, allow_special=True), stop_ids, text=prompt)
        ids = [int(t) for t in prompt]  # type: ignore[union-attr]
        text = self.tokenizer.decode(ids)
        return _Prompt(ids, stop_ids, text=text, constraint=self._completion_constraint(req, text))

    def _completion_constraint(self, req: CompletionRequest, text: str) -> Constraint | None:
        try:
            return completion_constraint(req, text, self.tokenizer)
        except StructuredOutputError as exc:
            raise OpenAIError(400, str(exc), param="tools") from exc

    async def _completion_prompt(self, req: CompletionRequest) -> _Prompt:
        chars = approx_chars(req.prompt)
        return await self.tokenize_pool.run(self._completion_prompt_sync, req, chars=chars)

    def _completion_logprobs(self, logprobs: list[TokenLogprob], offset: int) -> CompletionLogprobs:
        out = CompletionLogprobs(top_logprobs=[])
        for lp in logprobs:
            text = self.tokenizer.token_bytes(lp.token_id).decode("utf-8", errors="replace")
            out.tokens.append(text)
            out.token_logprobs.append(lp.logprob)
            out.text_offset.append(offset)
            offset += len(text)
            assert out.top_logprobs is not None
            out.top_logprobs.append(
                {
                    self.tokenizer.token_bytes(t).decode("utf-8", errors="replace"): v
                    for t, v in lp.top
                }
            )
        return out

    async def _completion_choice(
        self, req: CompletionRequest, prompt: _Prompt, index: int
    ) -> tuple[CompletionChoice, _Run]:
        processor = prompt.constraint.processor() if prompt.constraint else None
        params = self._params(
            req, prompt.stop_ids, logprobs=req.logprobs, index=index, processor=processor
        )
        stream = self._start(prompt.ids, params)
        run = _Run(texts=[prompt.text] if req.echo else [])
        async for out in self._outputs(stream):
            run.texts.extend(p.text for p in out.pieces)
            run.token_ids += out.token_ids
            run.logprobs += out.logprobs
            run.last = out
        if run.last is not None and run.last.error:
            raise OpenAIError(500, run.last.error, type="server_error", code="engine_error")
        offset = len(prompt.text) if req.echo else 0
        choice = CompletionChoice(
            index=index,
            text="".join(run.texts),
            finish_reason=run.last.finish_reason if run.last else "stop",
            logprobs=(
                self._completion_logprobs(run.logprobs, offset)
                if req.logprobs is not None
                else None
            ),
            token_ids=run.token_ids if req.return_token_ids else None,
            stop_reason=run.last.stop_string if run.last else None,
        )
        return choice, run

    async def completion(self, req: CompletionRequest) -> Completion:
        prompt = await self._completion_prompt(req)
        results = await gather_choices(
            [self._completion_choice(req, prompt, i) for i in range(req.n)]
        )
        return Completion(
            model=self.served_model_name,
            choices=[c for c, _ in results],
            usage=_usage([r.last for _, r in results]),
            prompt_token_ids=prompt.ids if req.return_token_ids else None,
        )

    async def completion_stream(self, req: CompletionRequest) -> AsyncIterator[Completion]:
        prompt = await self._completion_prompt(req)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        cid, created = new_id("cmpl"), int(time.time())
        streams = await self._start_all(
            prompt.ids,
            [
                self._params(
                    req,
                    prompt.stop_ids,
                    logprobs=req.logprobs,
                    index=i,
                    processor=prompt.constraint.processor() if prompt.constraint else None,
                )
                for i in range(req.n)
            ],
        )
        lasts: list[EngineOutput | None] = [None] * req.n

        def chunk(index: int, text: str, finish: str | None = None, **extra: Any) -> Completion:
            return Completion(
                id=cid,
                created=created,
                model=self.served_model_name,
                choices=[CompletionChoice(index=index, text=text, finish_reason=finish, **extra)],
            )

        async def one(index: int) -> AsyncIterator[Completion]:
            first = chunk(index, prompt.text if req.echo else "")
            if index == 0 and req.return_token_ids:
                first.prompt_token_ids = prompt.ids
            yield first
            offset = len(prompt.text) if req.echo else 0
            async for out in self._outputs(streams[index]):
                lasts[index] = out
                text = "".join(p.text for p in out.pieces)
                extra: dict[str, Any] = {}
                if req.logprobs is not None and out.logprobs:
                    extra["logprobs"] = self._completion_logprobs(out.logprobs, offset)
                if req.return_token_ids and out.token_ids:
                    extra["token_ids"] = out.token_ids
                offset += len(text)
                if out.finished:
                    if out.error:
                        raise OpenAIError(500, out.error, type="server_error", code="engine_error")
                    extra["stop_reason"] = out.stop_string
                    yield chunk(index, text, out.finish_reason, **extra)
                elif text or extra:
                    yield chunk(index, text, **extra)

        try:
            async for item in merge([one(i) for i in range(req.n)]):
                yield item
        finally:
            for stream in streams:
                await stream.aclose()
        if include_usage:
            yield Completion(
                id=cid, created=created, model=self.served_model_name, choices=[],
                usage=_usage(lasts),
            )  # fmt: skip

    # -- tokenize ------------------------------------------------------------------------------------

    def _tokenize_sync(
        self, req: TokenizeRequest, cancel: threading.Event | None = None
    ) -> TokenizeResponse:
        engine_len = self.engine.max_model_len if self.engine else None
        if req.prompt is not None:
            self._check_length(
                [(req.prompt, False)], "prompt", cancel, allow_special=req.add_special_tokens
            )
            ids = self.tokenizer.encode(req.prompt, allow_special=req.add_special_tokens)
            return TokenizeResponse(tokens=ids, count=len(ids), max_model_len=engine_len)
        chat = chat_request(
            {
                "messages": req.messages or [],
                "tools": req.tools,
                "tool_choice": req.tool_choice,
                "response_format": req.response_format,
                "reasoning_effort": req.reasoning_effort,
            }
        )
        rendered = self._render(chat, add_generation_prompt=req.add_generation_prompt)
        self._check_length(rendered.segments, "messages", cancel)
        ids = rendered.token_ids(self.tokenizer)
        return TokenizeResponse(
            tokens=ids, count=len(ids), max_model_len=engine_len, text=rendered.text
        )

    async def tokenize(self, req: TokenizeRequest) -> TokenizeResponse:
        chars = approx_chars([req.prompt, req.messages, req.tools])
        return await self.tokenize_pool.run(self._tokenize_sync, req, chars=chars)

    async def detokenize(self, req: DetokenizeRequest) -> DetokenizeResponse:
        bad = [t for t in req.tokens if not 0 <= t < self.tokenizer.vocab_size]
        if bad:
            raise OpenAIError(
                400,
                f"tokens: ids {bad[:8]} are not in [0, {self.tokenizer.vocab_size})",
                param="tokens",
            )
        text = self.tokenizer.decode(req.tokens, skip_special=req.skip_special_tokens)
        return DetokenizeResponse(prompt=text)
