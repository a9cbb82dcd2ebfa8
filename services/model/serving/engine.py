"""The engine loop: a background thread stepping the scheduler, asyncio queues to the API.

Requests are submitted from the event loop (:meth:`Engine.stream`, an async iterator) into a
thread-safe inbox; the engine thread drains it, schedules one ragged batch
(:mod:`~services.model.serving.scheduler`), runs the model, samples, detokenises, applies stop
tokens / stop strings / ``max_tokens``, and hands each request's new output to its asyncio queue
with ``call_soon_threadsafe``. The model runs in one thread because a step is one batched
forward; the event loop stays free to accept and stream while it runs.

A client that goes away aborts its request (:meth:`RequestStream.aclose`), which frees its state at
the next step.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from services.model.serving.metrics import MEMORY_METRICS
from services.model.serving.prefix_cache import PrefixCache, prefix_cache_metrics
from services.model.serving.runner import ModelRunner
from services.model.serving.sampling import Sampler, SamplingParams, TokenLogprob
from services.model.serving.scheduler import AdmissionClass, SchedRequest, Scheduler
from services.model.tokenizer.base import IncrementalDecoder, Piece, Tokenizer

log = logging.getLogger("k3stack.model.engine")

FinishReason = str  # "stop" | "length" | "abort" | "error"


class EngineError(ValueError):
    """A request the engine cannot take (the API answers 400); ``param`` names the field."""

    status = 400

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class EngineBusy(EngineError):
    """The queue is full (the API answers 429 with ``Retry-After``)."""

    status = 429


@dataclass
class EngineOutput:
    """New output of one request since the last one it got."""

    request_id: str
    token_ids: list[int]
    pieces: list[Piece]
    finished: bool = False
    finish_reason: FinishReason | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    error: str | None = None
    #: One per token in ``token_ids`` when the request asked for logprobs.
    logprobs: list[TokenLogprob] = field(default_factory=list)
    #: Seconds from submission to first admission (on the finished output).
    queue_time_s: float | None = None
    #: The stop string that ended the output, if one did (on the finished output).
    stop_string: str | None = None


class StopStrings:
    """Finds stop strings in streamed text, holding back only what could still start one."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""
        self.matched: str | None = None  # the stop string that ended the output

    def push(self, pieces: list[Piece]) -> tuple[list[Piece], bool]:
        """(pieces safe to emit, whether a stop string ended the output)."""
        if not self.stops:
            return pieces, False
        out: list[Piece] = []
        for p in pieces:
            if p.special:
                out.extend(self.flush())
                out.append(p)
                continue
            buf = self._held + p.text
            hits = [(buf.find(s), s) for s in self.stops if s in buf]
            if hits:
                idx, self.matched = min(hits)
                if idx:
                    out.append(Piece(buf[:idx]))
                self._held = ""
                return out, True
            keep = self._partial_suffix(buf)
            self._held = buf[len(buf) - keep :] if keep else ""
            if len(buf) > keep:
                out.append(Piece(buf[: len(buf) - keep]))
        return out, False

    def flush(self) -> list[Piece]:
        held, self._held = self._held, ""
        return [Piece(held)] if held else []

    def _partial_suffix(self, buf: str) -> int:
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:k]):
                    best = k
                    break
        return best


@dataclass(eq=False)
class _Request(SchedRequest):
    params: SamplingParams = field(default_factory=SamplingParams)
    sink: Callable[[EngineOutput], None] = lambda out: None
    sampler: Sampler | None = None
    decoder: IncrementalDecoder | None = None
    stopper: StopStrings | None = None
    stop_ids: frozenset[int] = frozenset()
    arrival: float = 0.0
    admitted_at: float | None = None
    finished: bool = False


class RequestStream:
    """Async iterator over one request's outputs; closing it early aborts the request."""

    def __init__(self, engine: Engine, request_id: str, queue: asyncio.Queue[EngineOutput]):
        self.engine = engine
        self.request_id = request_id
        self._queue = queue
        self._done = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> EngineOutput:
        if self._done:
            raise StopAsyncIteration
        try:
            out = await self._queue.get()
        except BaseException:  # cancelled: the client went away
            await self.aclose()
            raise
        self._done = out.finished
        return out

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            self.engine.abort(self.request_id)


@dataclass
class EngineStats:
    num_steps: int = 0
    num_computed_tokens: int = 0  # tokens run through the model (prefill + decode)
    num_generated_tokens: int = 0
    num_finished: int = 0
    num_preemptions: int = 0
    num_aborted: int = 0
    last_batch_tokens: int = 0
    last_batch_requests: int = 0


class Engine:
    """Continuous batching over one :class:`ModelRunner`."""

    def __init__(
        self,
        runner: ModelRunner,
        tokenizer: Tokenizer,
        *,
        max_num_seqs: int = 16,
        max_num_batched_tokens: int = 512,
        prefix_cache: PrefixCache | None = None,
        max_queued_requests: int | None = None,
        admission_classes: Sequence[AdmissionClass] = (),
    ) -> None:
        """``max_queued_requests``: how many requests may wait beyond ``max_num_seqs`` before
        :meth:`submit` raises :class:`EngineBusy` (None = no limit)."""
        self.runner = runner
        self.max_num_seqs = max_num_seqs
        self.max_queued_requests = max_queued_requests
        self.tokenizer = tokenizer
        self.scheduler = Scheduler(
            runner,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            prefix_cache=prefix_cache,
            on_preempt=self._on_preempt,
            admission_classes=admission_classes,
        )
        self.prefix_cache = prefix_cache
        self.stats = EngineStats()
        self._cv = threading.Condition()
        self._inbox: list[_Request] = []
        self._aborts: set[str] = set()
        self._by_id: dict[str, _Request] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ids = itertools.count()
        # Sample only ids both the model and the tokenizer know.
        self.vocab_limit = min(runner.vocab_size, tokenizer.vocab_size)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="k3-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for req in list(self._by_id.values()):
            self._finish(req, "abort", [], error="engine stopped")

    @property
    def max_model_len(self) -> int:
        return self.runner.max_model_len

    # -- submission ------------------------------------------------------------------------------

    def check_request(self, prompt_ids: list[int], max_tokens: int | None) -> int:
        """Validate lengths; returns the effective ``max_tokens``. Raises :class:`EngineError`."""
        n = len(prompt_ids)
        if n == 0:
            raise EngineError("the prompt is empty", param="prompt")
        limit = self.max_model_len
        if n >= limit:
            raise EngineError(
                f"this model's maximum context length is {limit} tokens; the prompt has {n}",
                param="messages",
                code="context_length_exceeded",
            )
        if max_tokens is None:
            return limit - n
        if n + max_tokens > limit:
            raise EngineError(
                f"this model's maximum context length is {limit} tokens; the prompt has {n} "
                f"and max_tokens asks for {max_tokens} more",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return max_tokens

    def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        sink: Callable[[EngineOutput], None],
        request_id: str | None = None,
    ) -> str:
        """Queue a request; ``sink`` is called from the engine thread with each output."""
        params.max_tokens = self.check_request(prompt_ids, params.max_tokens)
        budgeted = getattr(params.logits_processor, "set_max_tokens", None)
        if budgeted is not None:  # a grammar that closes within the budget needs to know it
            budgeted(params.max_tokens)
        rid = request_id or f"req-{next(self._ids)}"
        if any(t < 0 or t >= self.runner.vocab_size for t in prompt_ids):
            raise EngineError(
                f"prompt token ids must be in [0, {self.runner.vocab_size})", param="prompt"
            )
        req = _Request(
            request_id=rid,
            prompt_ids=list(prompt_ids),
            params=params,
            sink=sink,
            sampler=Sampler(params, self.vocab_limit, prompt_ids),
            decoder=IncrementalDecoder(self.tokenizer),
            stopper=StopStrings(params.stop),
            stop_ids=frozenset(params.stop_token_ids),
            arrival=time.monotonic(),
        )
        with self._cv:
            if self._stopping or self._thread is None:
                raise RuntimeError("the engine is not running")
            limit = self.max_queued_requests
            if limit is not None and len(self._by_id) >= self.max_num_seqs + limit:
                raise EngineBusy(
                    f"the engine is saturated ({len(self._by_id)} requests in flight, "
                    f"{self.max_num_seqs} running and {limit} queued at most); retry later",
                    code="engine_saturated",
                )
            self._by_id[rid] = req
            self._inbox.append(req)
            self._cv.notify_all()
        return rid

    def abort(self, request_id: str) -> None:
        with self._cv:
            if request_id in self._by_id:
                self._aborts.add(request_id)
                self._cv.notify_all()

    def stream(
        self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> RequestStream:
        """Submit now (raising :class:`EngineError` at once) and stream the outputs.

        Must be called on the event loop that will read the stream.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[EngineOutput] = asyncio.Queue()

        def sink(out: EngineOutput) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, out)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                pass

        rid = self.submit(prompt_ids, params, sink, request_id)
        return RequestStream(self, rid, queue)

    # -- the loop ----------------------------------------------------------------------------------

    def _loop(self) -> None:
        import torch

        log.info("engine loop started")
        with torch.inference_mode():
            while True:
                with self._cv:
                    while not (
                        self._stopping or self._inbox or self._aborts or self.scheduler.has_work()
                    ):
                        self._cv.wait()
                    if self._stopping:
                        break
                    inbox, self._inbox = self._inbox, []
                    aborts, self._aborts = self._aborts, set()
                for req in inbox:
                    self.scheduler.add(req)
                for rid in aborts:
                    req = self._by_id.get(rid)
                    if req is not None:
                        self.stats.num_aborted += 1
                        self._finish(req, "abort", [])
                try:
                    self.step()
                except Exception:  # noqa: BLE001 - one bad step must not kill the server
                    log.exception("engine step failed")
        log.info("engine loop stopped")

    def step(self) -> None:
        """Schedule, run and sample one batch (engine thread only)."""
        batch = self.scheduler.schedule()
        if not batch:
            if self.scheduler.waiting and not self.scheduler.running:
                # Nothing runs and the head cannot be admitted: cannot happen for requests that
                # passed check_request, but never spin on it silently.
                head = self.scheduler.waiting[0]
                self._finish(head, "error", [], error="request does not fit the state pools")
            return
        states = [c.request.state for c in batch]
        try:
            logits = self.runner.forward([c.token_ids for c in batch], states)
        except Exception as exc:  # noqa: BLE001 - fail this batch's requests, keep serving
            log.exception("model forward failed for %d requests", len(batch))
            for c in batch:
                self._finish(c.request, "error", [], error=f"model error: {exc}")  # type: ignore[arg-type]
            return
        self.stats.num_steps += 1
        self.stats.last_batch_requests = len(batch)
        self.stats.last_batch_tokens = sum(len(c.token_ids) for c in batch)
        now = time.monotonic()
        for chunk, row in zip(batch, logits, strict=True):
            req: _Request = chunk.request  # type: ignore[assignment]
            if req.admitted_at is None:
                req.admitted_at = now
            samples = chunk.samples
            req.num_computed += len(chunk.token_ids)
            self.stats.num_computed_tokens += len(chunk.token_ids)
            if self.prefix_cache is not None:
                self.prefix_cache.on_prefill_chunk(req.all_ids()[: req.num_computed], req.state)
            if samples and not req.finished:
                try:
                    self._sample(req, row)
                except Exception as exc:  # noqa: BLE001 - e.g. non-finite logits: fail one request
                    log.exception("sampling failed for %s", req.request_id)
                    self._finish(req, "error", [], error=f"sampling failed: {exc}")

    def _sample(self, req: _Request, logits) -> None:  # type: ignore[no-untyped-def]
        assert req.sampler and req.decoder and req.stopper
        token = req.sampler.sample(logits)
        logprobs = [req.sampler.last_logprob] if req.sampler.last_logprob is not None else []
        req.output_ids.append(token)
        self.stats.num_generated_tokens += 1
        reason: FinishReason | None = None
        pieces: list[Piece] = []
        if token in req.stop_ids:
            reason = "stop"
        else:
            pieces, stopped = req.stopper.push(req.decoder.push(token))
            if stopped:
                reason = "stop"
        if reason is None and (
            len(req.output_ids) >= req.params.max_tokens or req.num_tokens >= self.max_model_len
        ):
            reason = "length"
        if reason is None:
            req.sink(self._output(req, [token], pieces, logprobs=logprobs))
            return
        if not (reason == "stop" and token not in req.stop_ids):
            pieces += req.stopper.push(req.decoder.flush())[0] + req.stopper.flush()
        self._finish(req, reason, pieces, tokens=[token], logprobs=logprobs)

    def _output(
        self,
        req: _Request,
        tokens: list[int],
        pieces: list[Piece],
        *,
        finished: bool = False,
        reason: FinishReason | None = None,
        error: str | None = None,
        logprobs: list[TokenLogprob] | None = None,
    ) -> EngineOutput:
        return EngineOutput(
            request_id=req.request_id,
            token_ids=tokens,
            pieces=pieces,
            finished=finished,
            finish_reason=reason,
            num_prompt_tokens=len(req.prompt_ids),
            num_output_tokens=len(req.output_ids),
            num_cached_tokens=req.num_cached,
            error=error,
            logprobs=logprobs or [],
            queue_time_s=(
                (req.admitted_at or time.monotonic()) - req.arrival if finished else None
            ),
            stop_string=req.stopper.matched if finished and req.stopper is not None else None,
        )

    def _finish(
        self,
        req: _Request,
        reason: FinishReason,
        pieces: list[Piece],
        *,
        tokens: list[int] | None = None,
        error: str | None = None,
        logprobs: list[TokenLogprob] | None = None,
    ) -> None:
        if req.finished:
            return
        req.finished = True
        self.scheduler.finish(req)
        with self._cv:
            self._by_id.pop(req.request_id, None)
        self.stats.num_finished += 1
        out = self._output(
            req, tokens or [], pieces, finished=True, reason=reason, error=error, logprobs=logprobs
        )
        req.sink(out)

    def _on_preempt(self, req: SchedRequest) -> None:
        self.stats.num_preemptions += 1

    def snapshot(self) -> dict[str, float]:
        """Counters and queue depths for /health and /metrics."""
        s = self.stats
        return {
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "free_slots": self.runner.num_free_slots,
            "steps": s.num_steps,
            "computed_tokens": s.num_computed_tokens,
            "generated_tokens": s.num_generated_tokens,
            "finished": s.num_finished,
            "preemptions": s.num_preemptions,
            "aborted": s.num_aborted,
            "cache_usage": float(getattr(self.runner, "cache_usage", 0.0)),
            **dict.fromkeys(MEMORY_METRICS, 0.0),
            **getattr(self.runner, "memory_readings", {}),
            **prefix_cache_metrics(self.prefix_cache),
            **self.scheduler.class_readings(),
        }
