"""Asking a judge model for JSON, through the platform's one way of calling a model."""

from __future__ import annotations

import json
import re
from typing import Any

import openai

from shared.llm import chat_text


class JudgeModelError(RuntimeError):
    """The judge model failed or never answered in the asked-for JSON."""


_FENCE = re.compile(r"\{.*\}", re.DOTALL)


def ask_json(
    client: openai.OpenAI, model: str | None, system: str, user: str, *, attempts: int = 2
) -> dict[str, Any]:
    """One JSON object from the model (the outermost ``{...}`` of its answer); asks again once
    when the answer does not parse."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    last = ""
    for _ in range(attempts):
        try:
            last = chat_text(messages, client=client, model=model, temperature=0)
        except openai.OpenAIError as exc:
            raise JudgeModelError(f"judge model call failed: {type(exc).__name__}: {exc}") from exc
        match = _FENCE.search(last)
        if match:
            try:
                value = json.loads(match.group(0))
            except ValueError:
                value = None
            if isinstance(value, dict):
                return value
        messages += [
            {"role": "assistant", "content": last},
            {"role": "user", "content": "Answer with one JSON object only, as asked."},
        ]
    raise JudgeModelError(f"judge model gave no JSON object: {last[:200]!r}")
