"""Sampling parameters and the per-request sampler (temperature, top-p, penalties, seed).

Each request owns a ``torch.Generator`` seeded from its ``seed`` (or a fresh random seed), so a
seeded request draws the same tokens whatever else is in the batch, given the same logits.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    """How one request is decoded; validated at the API boundary, trusted here."""

    max_tokens: int = 256
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0


class Sampler:
    """Draws the next token of one request from its last-position logits."""

    def __init__(self, params: SamplingParams, vocab_limit: int) -> None:
        self.params = params
        self.vocab_limit = vocab_limit
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self._counts: dict[int, int] = {}

    def sample(self, logits: torch.Tensor) -> int:
        """``logits [vocab]`` (any device) -> a token id below ``vocab_limit``."""
        p = self.params
        x = logits.detach().to("cpu", torch.float32)[: self.vocab_limit].clone()
        if not bool(torch.isfinite(x).any()):
            raise ValueError("the model produced no finite logits")
        x = torch.nan_to_num(x, nan=float("-inf"), posinf=torch.finfo(torch.float32).max)
        if self._counts and (p.frequency_penalty or p.presence_penalty):
            ids = torch.tensor(list(self._counts), dtype=torch.long)
            counts = torch.tensor(list(self._counts.values()), dtype=torch.float32)
            x[ids] -= p.frequency_penalty * counts + p.presence_penalty
        if p.temperature <= 0.0:
            token = int(torch.argmax(x))
        else:
            probs = torch.softmax(x / p.temperature, dim=-1)
            if p.top_p < 1.0:
                probs = top_p_filter(probs, p.top_p)
            token = int(torch.multinomial(probs, 1, generator=self.generator))
        self._counts[token] = self._counts.get(token, 0) + 1
        return token


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``; renormalise.

    The most likely token always survives (nothing is above it), so ``top_p`` near 0 is greedy.
    """
    sorted_p, order = torch.sort(probs, descending=True)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass strictly above each token
    sorted_p = torch.where(before < top_p, sorted_p, torch.zeros_like(sorted_p))
    out = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    return out / out.sum()
