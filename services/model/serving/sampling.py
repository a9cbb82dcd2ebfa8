"""Sampling parameters and the per-request sampler.

Each request owns a ``torch.Generator`` seeded from its ``seed`` (or a fresh random seed), so a
seeded request draws the same tokens whatever else is in the batch, given the same logits.

The order of the logits pipeline follows vLLM: ``logit_bias`` -> the request's logits processor
(a grammar mask, :mod:`~services.model.serving.structured`) -> repetition / frequency / presence
penalties -> temperature -> ``top_k`` -> ``top_p`` -> ``min_p`` -> draw. Logprobs, when asked for,
are of the model's own distribution (log-softmax of the raw logits, vLLM's default), so a trainer
recomputing them with a forward pass gets the same numbers.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Protocol

import torch


class LogitsProcessor(Protocol):
    """A per-request constraint on the next token (e.g. a grammar); sees every drawn token."""

    def mask(self, logits: torch.Tensor) -> None:
        """Set the logits of tokens that may not come next to ``-inf``, in place."""

    def accept(self, token: int) -> None:
        """Advance past the token that was drawn."""


@dataclass
class SamplingParams:
    """How one request is decoded; validated at the API boundary, trusted here."""

    max_tokens: int = 256
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0  # 1 = off; over prompt and output tokens
    logit_bias: dict[int, float] = field(default_factory=dict)
    #: None = no logprobs; k >= 0 = the drawn token's logprob plus the k most likely.
    logprobs: int | None = None
    logits_processor: LogitsProcessor | None = None


@dataclass
class TokenLogprob:
    """The drawn token's logprob and the most likely alternatives, ``(token id, logprob)``."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


class Sampler:
    """Draws the next token of one request from its last-position logits."""

    def __init__(
        self, params: SamplingParams, vocab_limit: int, prompt_ids: list[int] | None = None
    ) -> None:
        self.params = params
        self.vocab_limit = vocab_limit
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self._counts: dict[int, int] = {}
        self._seen: set[int] = {t for t in prompt_ids or () if 0 <= t < vocab_limit}
        self.last_logprob: TokenLogprob | None = None

    def sample(self, logits: torch.Tensor) -> int:
        """``logits [vocab]`` (any device) -> a token id below ``vocab_limit``."""
        p = self.params
        raw = logits.detach().to("cpu", torch.float32)[: self.vocab_limit]
        x = raw.clone()
        if not bool(torch.isfinite(x).any()):
            raise ValueError("the model produced no finite logits")
        x = torch.nan_to_num(x, nan=float("-inf"), posinf=torch.finfo(torch.float32).max)
        if p.logit_bias:
            ids = torch.tensor(list(p.logit_bias), dtype=torch.long)
            x[ids] += torch.tensor(list(p.logit_bias.values()), dtype=torch.float32)
        if p.logits_processor is not None:
            p.logits_processor.mask(x)
            if not bool(torch.isfinite(x).any()):
                raise ValueError("the output constraint allows no next token")
        if p.repetition_penalty != 1.0 and self._seen:
            ids = torch.tensor(sorted(self._seen), dtype=torch.long)
            seen = x[ids]
            x[ids] = torch.where(seen > 0, seen / p.repetition_penalty, seen * p.repetition_penalty)
        if self._counts and (p.frequency_penalty or p.presence_penalty):
            ids = torch.tensor(list(self._counts), dtype=torch.long)
            counts = torch.tensor(list(self._counts.values()), dtype=torch.float32)
            x[ids] -= p.frequency_penalty * counts + p.presence_penalty
        if p.temperature <= 0.0:
            token = int(torch.argmax(x))
        else:
            x = x / p.temperature
            if p.top_k and p.top_k < x.numel():
                kth = torch.topk(x, p.top_k).values[-1]
                x = torch.where(x < kth, torch.full_like(x, float("-inf")), x)
            probs = torch.softmax(x, dim=-1)
            if p.top_p < 1.0:
                probs = top_p_filter(probs, p.top_p)
            if p.min_p > 0.0:
                probs = min_p_filter(probs, p.min_p)
            token = int(torch.multinomial(probs, 1, generator=self.generator))
        if p.logits_processor is not None:
            p.logits_processor.accept(token)
        if p.logprobs is not None:
            self.last_logprob = token_logprob(raw, token, p.logprobs)
        self._counts[token] = self._counts.get(token, 0) + 1
        self._seen.add(token)
        return token


def token_logprob(logits: torch.Tensor, token: int, k: int) -> TokenLogprob:
    """The model's logprob of ``token`` and its ``k`` most likely tokens."""
    lp = torch.log_softmax(torch.nan_to_num(logits.float(), nan=float("-inf")), dim=-1)
    top: list[tuple[int, float]] = []
    if k > 0:
        values, ids = torch.topk(lp, min(k, lp.numel()))
        top = [(int(i), float(v)) for i, v in zip(ids, values, strict=True)]
    return TokenLogprob(token, float(lp[token]), top)


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``; renormalise.

    The most likely token always survives (nothing is above it), so ``top_p`` near 0 is greedy.
    """
    sorted_p, order = torch.sort(probs, descending=True)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass strictly above each token
    sorted_p = torch.where(before < top_p, sorted_p, torch.zeros_like(sorted_p))
    out = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    return out / out.sum()


def min_p_filter(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop tokens less likely than ``min_p`` times the most likely one; renormalise."""
    out = torch.where(probs >= min_p * probs.max(), probs, torch.zeros_like(probs))
    return out / out.sum()
