"""Request classes for budget-based admission (report §5.4.3): prompt-length buckets, each with
its own prefill-token budget per engine step (kept free of torch so the app can read them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AdmissionClass", "parse_admission_classes"]


def parse_admission_classes(spec: str, default_budget: int) -> list[AdmissionClass]:
    """``"2048:128,*:256"`` -> prompts up to 2,048 tokens get 128 tokens a step, the rest 256;
    without a ``*`` class, longer prompts get ``default_budget``."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        limit, _, budget = part.partition(":")
        if not budget.isdigit() or int(budget) <= 0 or not (limit == "*" or limit.isdigit()):
            raise ValueError(f"admission class {part!r} is not 'max_prompt_tokens:budget'")
        out.append(AdmissionClass(None if limit == "*" else int(limit), int(budget)))
    if out and out[-1].max_prompt_tokens is not None:
        out.append(AdmissionClass(None, default_budget))
    return out


@dataclass(frozen=True)
class AdmissionClass:
    """Prompts of at most ``max_prompt_tokens`` (None: any length) share ``token_budget``
    prefill tokens per step, so a burst of long prompts uses up only its own class's share."""

    max_prompt_tokens: int | None
    token_budget: int
