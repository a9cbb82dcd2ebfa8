"""A synchronous greedy driver of the scheduler: the engine loop without threads or sampling params.

Benches and the cache-equivalence tests need to run many requests through exactly the serving
path (scheduler, runner, prefix cache) and compare logits; the async :class:`Engine` adds
nothing to that but threads. Every step it schedules, runs the forward, tells the cache, and
appends the argmax token to requests whose last position was new.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from services.model.serving.prefix_cache import PrefixCache
from services.model.serving.runner import ModelRunner
from services.model.serving.scheduler import AdmissionClass, SchedRequest, Scheduler

__all__ = ["OfflineEngine", "OfflineResult"]


@dataclass
class OfflineResult:
    request_id: str
    prompt_len: int
    output_ids: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)  # one row per sampled token
    cached_tokens: int = 0
    computed_tokens: int = 0
    first_token_step: int | None = None
    admit_step: int | None = None


class OfflineEngine:
    """Greedy generation of whole batches of requests through one scheduler."""

    def __init__(
        self,
        runner: ModelRunner,
        *,
        max_num_seqs: int = 4,
        max_num_batched_tokens: int = 256,
        prefix_cache: PrefixCache | None = None,
        admission_classes: Sequence[AdmissionClass] = (),
    ) -> None:
        self.runner = runner
        self.prefix_cache = prefix_cache
        self.scheduler = Scheduler(
            runner,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            prefix_cache=prefix_cache,
            admission_classes=admission_classes,
        )
        self.steps = 0
        self._results: dict[int, OfflineResult] = {}
        self._max_tokens: dict[int, int] = {}

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_tokens: int) -> SchedRequest:
        req = SchedRequest(request_id, list(prompt_ids))
        self._results[id(req)] = OfflineResult(request_id, len(prompt_ids))
        self._max_tokens[id(req)] = max_tokens
        self.scheduler.add(req)
        return req

    def step(self) -> list[OfflineResult]:
        """One scheduling step; returns the requests that finished in it."""
        batch = self.scheduler.schedule()
        if not batch:
            return []
        self.steps += 1
        logits = self.runner.forward([c.token_ids for c in batch], [c.request.state for c in batch])
        done = []
        for chunk, row in zip(batch, logits, strict=True):
            req = chunk.request
            res = self._results[id(req)]
            if res.admit_step is None:
                res.admit_step, res.cached_tokens = self.steps, req.num_cached
            samples = chunk.samples
            req.num_computed += len(chunk.token_ids)
            res.computed_tokens += len(chunk.token_ids)
            if self.prefix_cache is not None:
                self.prefix_cache.on_prefill_chunk(req.all_ids()[: req.num_computed], req.state)
            if not samples:
                continue
            res.logits.append(row.float().clone())
            req.output_ids.append(int(row.argmax()))
            res.first_token_step = res.first_token_step or self.steps
            if len(req.output_ids) >= self._max_tokens[id(req)]:
                res.output_ids = list(req.output_ids)
                self.scheduler.finish(req)
                done.append(res)
        return done

    def run(self, max_steps: int = 100_000) -> list[OfflineResult]:
        """Step until every submitted request finished; results in finishing order."""
        done: list[OfflineResult] = []
        while self.scheduler.has_work():
            if self.steps >= max_steps:
                raise RuntimeError(f"not done after {max_steps} steps")
            done += self.step()
        return done

    def generate(
        self, prompt_ids: Sequence[int], max_tokens: int, request_id: str = "r"
    ) -> OfflineResult:
        """One request alone, to completion."""
        self.submit(request_id, prompt_ids, max_tokens)
        (res,) = self.run()
        return res
