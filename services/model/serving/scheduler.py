"""Continuous-batching scheduler with chunked prefill.

Each step builds one ragged batch under a token budget (``max_num_batched_tokens``):

1. every running request that has finished its prefill gets its one decode token (decodes go
   first, so time-per-output-token stays flat while new prompts arrive);
2. running requests part-way through their prefill get their next chunk;
3. waiting requests are admitted, first come first served, while the budget, the sequence limit
   and the state pools allow, each with a first prefill chunk (asking the prefix cache, if any,
   how much of the prompt it already holds). With admission classes (prompt-length buckets,
   report §5.4.3; on by default) each class also has its own prefill-token budget per step
   while another class has prefill work, and a request whose class has spent it waits without
   holding back requests of other classes: a short chat is admitted at once while a 27K-token
   prompt prefills, instead of waiting for all of it.

Prefill chunks end on the KDA chunk grid (multiples of the runner's ``prefill_align``) unless
they reach the prompt's end, with or without a cache, so a prompt computes the same numbers
however it was split or resumed; a chunk that cannot reach the grid this step waits for one that
can. Only a budget smaller than the grid itself splits off it.

Admission waits rather than fails: a request that finds no free state slot or too few latent
blocks stays at the head of the queue until a running request finishes. When a running decode
cannot get a block, the most recently admitted other request is preempted (its state freed; it
is re-queued at the front and recomputed from its tokens later: the prompt by prefill, its
generated tokens replayed one per step through the decode kernels), as vLLM does; a request alone
always fits, because the engine rejects any request longer than the pools at submission.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.model.serving.admission import AdmissionClass, parse_admission_classes
from services.model.serving.prefix_cache import PrefixCache
from services.model.serving.runner import ModelRunner, PoolExhausted

__all__ = ["AdmissionClass", "Scheduler", "SchedRequest", "parse_admission_classes"]

log = logging.getLogger("k3stack.model.scheduler")


@dataclass(eq=False)
class SchedRequest:
    """The scheduler's view of a request: its tokens and how many the state covers."""

    request_id: str
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    state: Any = None
    num_computed: int = 0
    num_cached: int = 0  # prompt tokens the prefix cache supplied at first admission
    num_preemptions: int = 0
    admitted_once: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def token(self, i: int) -> int:
        n = len(self.prompt_ids)
        return self.prompt_ids[i] if i < n else self.output_ids[i - n]

    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def is_prefilling(self) -> bool:
        return self.num_tokens - self.num_computed > 1 or not self.output_ids


@dataclass
class ScheduledChunk:
    """Tokens of one request to run this step; ``samples`` = its last position is new."""

    request: SchedRequest
    token_ids: list[int]
    reserved: list[int]

    @property
    def samples(self) -> bool:
        return self.request.num_computed + len(self.token_ids) == self.request.num_tokens


class Scheduler:
    """Decides each step's batch; owns the waiting queue and the running list."""

    def __init__(
        self,
        runner: ModelRunner,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        prefix_cache: PrefixCache | None = None,
        on_preempt: Callable[[SchedRequest], None] | None = None,
        admission_classes: Sequence[AdmissionClass] = (),
    ) -> None:
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({max_num_seqs}) so every running request can decode each step"
            )
        self.runner = runner
        #: Prefill chunks end on multiples of this (the KDA chunk grid), so a prompt prefilled in
        #: any number of steps, or resumed from a cached prefix, runs the same chunks.
        self.prefill_align = int(getattr(runner, "prefill_align", 0) or 0)
        interval = getattr(prefix_cache, "checkpoint_interval", None)
        if interval and self.prefill_align and interval % self.prefill_align:
            raise ValueError(
                f"the prefix cache's hash block ({interval} tokens) must be a multiple of the KDA "
                f"prefill chunk ({self.prefill_align} tokens), or a cached prefix would resume "
                "prefill off the chunk grid and differ from an uncached run"
            )
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.prefix_cache = prefix_cache
        self.on_preempt = on_preempt
        self.waiting: deque[SchedRequest] = deque()
        self.running: list[SchedRequest] = []
        self.num_preemptions = 0
        self.classes = list(admission_classes)
        if self.classes and self.classes[-1].max_prompt_tokens is not None:
            self.classes.append(AdmissionClass(None, max_num_batched_tokens))
        #: Per class: requests admitted, and request-steps spent waiting (queueing pressure).
        self.class_admitted = [0] * len(self.classes)
        self.class_wait_steps = [0] * len(self.classes)

    def class_of(self, req: SchedRequest) -> int:
        for k, c in enumerate(self.classes):
            if c.max_prompt_tokens is None or len(req.prompt_ids) <= c.max_prompt_tokens:
                return k
        return 0

    def class_readings(self) -> dict[str, float]:
        """Per admission class: requests waiting now, admitted, and request-steps spent waiting."""
        out: dict[str, float] = {}
        if not self.classes:  # admission classes off: nothing per class to read
            return out
        waiting = [0] * len(self.classes)
        queued: tuple[SchedRequest, ...] = ()
        for _ in range(100):  # /health reads this while the engine thread changes the queue
            try:
                queued = tuple(self.waiting)
                break
            except RuntimeError:  # mutated mid-copy: copy again
                continue
        for req in queued:
            waiting[self.class_of(req)] += 1
        for k in range(len(self.classes)):
            out[f"class{k}_waiting"] = waiting[k]
            out[f"class{k}_admitted"] = self.class_admitted[k]
            out[f"class{k}_wait_steps"] = self.class_wait_steps[k]
        return out

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, req: SchedRequest) -> None:
        self.waiting.append(req)

    def finish(self, req: SchedRequest) -> None:
        """Drop ``req`` wherever it is and free its state."""
        if req in self.running:
            self.running.remove(req)
        else:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        if req.state is not None:
            if self.prefix_cache is not None and req.num_computed:
                self.prefix_cache.on_finished(req.all_ids()[: req.num_computed], req.state)
            self.runner.free(req.state)
            req.state = None

    # -- one step ----------------------------------------------------------------------------

    def schedule(self) -> list[ScheduledChunk]:
        begin_step = getattr(self.prefix_cache, "begin_step", None)
        if begin_step is not None:
            begin_step()
        budget = self.max_num_batched_tokens
        preemptions_before = self.num_preemptions
        batch: list[ScheduledChunk] = []
        scheduled: set[int] = set()
        class_left = [c.token_budget for c in self.classes]
        if self.classes and len(self._classes_with_prefill()) <= 1:
            # One class alone has nobody to hold back: it may use the whole step.
            class_left = [budget] * len(self.classes)

        # 1. decodes
        for req in list(self.running):
            if req.is_prefilling or req.state is None or id(req) in scheduled:
                continue
            if budget <= 0:
                break
            taken = self._reserve_preempting(req, 1, scheduled)
            if taken is None:
                continue  # req itself was preempted
            batch.append(ScheduledChunk(req, [req.token(req.num_computed)], taken))
            scheduled.add(id(req))
            budget -= 1

        # 2. running prefills
        for req in list(self.running):
            if budget <= 0:
                break
            if not req.is_prefilling or id(req) in scheduled or req.state is None:
                continue
            room = min(budget, class_left[self.class_of(req)]) if self.classes else budget
            if room <= 0:
                continue
            chunk = self._chunk(req, room, self._full_room(req))
            if not chunk:
                continue  # too little room left this step to reach the chunk grid
            # Preempting later requests here too means the earliest request always progresses,
            # so prefills can never wait on each other forever.
            taken = self._reserve_preempting(req, len(chunk), scheduled)
            if taken is None:
                continue
            batch.append(ScheduledChunk(req, chunk, taken))
            scheduled.add(id(req))
            budget -= len(chunk)
            if self.classes:
                class_left[self.class_of(req)] -= len(chunk)

        # 3. admissions (none in a step that had to preempt: memory is short)
        if self.num_preemptions != preemptions_before:
            return batch
        # With admission classes a request whose class has spent its budget waits without
        # blocking the others behind it; within a class the order stays first come first served.
        for req in list(self.waiting):
            if budget <= 0 or len(self.running) >= self.max_num_seqs:
                break
            k = self.class_of(req) if self.classes else -1
            room = min(budget, class_left[k]) if self.classes else budget
            if room <= 0:
                continue
            full = self._full_room(req)
            if room < self.prefill_align <= full and room < min(full, len(req.prompt_ids)):
                continue  # a first chunk could not reach the chunk grid: wait for more room
            if self.runner.num_free_slots <= 0:
                break
            try:
                state = self.runner.allocate()
            except PoolExhausted:
                break
            state.prefill_end = len(req.prompt_ids)
            cached = 0
            if self.prefix_cache is not None:
                # Only prompt tokens: generated ones are replayed through the decode kernels.
                cached = self.prefix_cache.match(req.prompt_ids, state)
            req.state, req.num_computed = state, cached
            chunk = self._chunk(req, room, self._full_room(req))
            try:
                if not chunk:
                    raise PoolExhausted("no room on the chunk grid this step")
                taken = self.runner.reserve(state, len(chunk))
            except PoolExhausted:
                if self.prefix_cache is not None:
                    self.prefix_cache.on_finished([], state)
                self.runner.free(state)
                req.state, req.num_computed = None, 0
                break
            self.waiting.remove(req)
            if not req.admitted_once:
                req.num_cached, req.admitted_once = cached, True
            self.running.append(req)
            batch.append(ScheduledChunk(req, chunk, taken))
            scheduled.add(id(req))
            budget -= len(chunk)
            if self.classes:
                class_left[k] -= len(chunk)
                self.class_admitted[k] += 1
        for req in self.waiting if self.classes else ():
            self.class_wait_steps[self.class_of(req)] += 1
        return batch

    def _classes_with_prefill(self) -> set[int]:
        """Admission classes with a request waiting or part-way through its prefill."""
        busy = {self.class_of(r) for r in self.running if r.is_prefilling}
        return busy | {self.class_of(r) for r in self.waiting}

    def _full_room(self, req: SchedRequest) -> int:
        """The most prefill tokens ``req`` could get in one step."""
        if self.classes:
            return min(self.max_num_batched_tokens, self.classes[self.class_of(req)].token_budget)
        return self.max_num_batched_tokens

    def _chunk(self, req: SchedRequest, budget: int, full: int) -> list[int]:
        """The next tokens of ``req`` to run in at most ``budget``; empty = wait for more room.

        The prompt is prefilled in chunks ending on the checkpoint interval where the budget
        allows (the KDA state exists only at chunk ends, so a prompt's last hash-aligned state
        is kept at one more step), else on the KDA chunk grid; only a budget smaller than the
        grid (``full``) ends a chunk off it. Generated tokens (after a preemption) are replayed
        one per step, as they were decoded.
        """
        start = req.num_computed
        prompt = len(req.prompt_ids)
        if start >= prompt:
            return [req.token(start)]
        end = min(prompt, start + budget)
        interval = getattr(self.prefix_cache, "checkpoint_interval", None)
        if interval and end // interval * interval > start:
            end = end // interval * interval  # the prompt's last chunk too
        elif end < prompt:
            if self.prefill_align and end // self.prefill_align * self.prefill_align > start:
                end = end // self.prefill_align * self.prefill_align
            elif budget < full and full >= self.prefill_align > 1:
                return []
        chunk_stop = getattr(self.prefix_cache, "chunk_stop", None)
        if chunk_stop is not None:
            end = chunk_stop(req.prompt_ids, start, end)
        return [req.token(i) for i in range(start, end)]

    def _reserve_preempting(
        self, req: SchedRequest, n: int, scheduled: set[int]
    ) -> list[int] | None:
        """Reserve room for ``req``, preempting later requests; None if ``req`` was preempted."""
        while True:
            try:
                return self.runner.reserve(req.state, n)
            except PoolExhausted:
                victims = [
                    r for r in self.running if r is not req and id(r) not in scheduled and r.state
                ]
                victim = victims[-1] if victims else req
                self.preempt(victim)
                if victim is req:
                    return None

    def preempt(self, req: SchedRequest) -> None:
        """Free ``req``'s state and queue it first; it recomputes its tokens when readmitted."""
        log.info("preempting request %s at %d tokens", req.request_id, req.num_tokens)
        self.running.remove(req)
        if self.prefix_cache is not None and req.num_computed:
            self.prefix_cache.on_finished(req.all_ids()[: req.num_computed], req.state)
        self.runner.free(req.state)
        req.state, req.num_computed = None, 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        if self.on_preempt is not None:
            self.on_preempt(req)
