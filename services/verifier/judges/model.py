"""Asking a judge model for JSON, through the platform's one way of calling a model.

Each question carries the JSON schema of its answer as the request's ``response_format``
(``json_schema``, strict): the model service constrains its decoding to it, so even a tiny model
answers in shape. An empty answer, one that does not parse, or one without the keys the
verdict needs is asked once more; a second such answer is a :class:`JudgeModelError`, which the jobs turn
into the named outcome ``judge_no_answer``. An endpoint that refuses ``response_format`` (400) is
asked again without it, and the answer is still checked against the schema here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import openai

from shared.llm import chat_text


class JudgeModelError(RuntimeError):
    """The judge model failed or never answered in the asked-for JSON."""

    code = "judge_no_answer"


_FENCE = re.compile(r"\{.*\}", re.DOTALL)


def obj(properties: dict[str, Any]) -> dict[str, Any]:
    """A strict JSON-schema object: every property required, no others."""
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}  # fmt: skip


def _parse(text: str, needs: tuple[str, ...]) -> dict[str, Any] | None:
    match = _FENCE.search(text)
    if not match:
        return None
    try:
        value = json.loads(match.group(0))
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if not set(needs) <= set(value):
        return None
    return value


def ask_json(
    client: openai.OpenAI, model: str | None, system: str, user: str, *,
    schema: dict[str, Any] | None = None, name: str = "judgement", needs: tuple[str, ...] = (),
    attempts: int = 2,
) -> dict[str, Any]:  # fmt: skip
    """One JSON object from the model (the outermost ``{...}`` of its answer, with the keys
    ``needs``); asks again once when the answer is empty or not that. ``schema`` goes to the
    endpoint as the answer's constrained format (strict: a model may not omit a key there,
    while an answer here only needs the keys the verdict rests on)."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    options: dict[str, Any] = {"temperature": 0}
    if schema is not None:
        options["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": True},
        }
    last, tries = "", 0
    while tries < attempts:
        try:
            last = chat_text(messages, client=client, model=model, **options)
        except openai.BadRequestError as exc:
            if "response_format" not in options:
                raise JudgeModelError(f"judge model call failed: {exc}") from exc
            options.pop("response_format")  # an endpoint without constrained output
            continue
        except openai.OpenAIError as exc:
            raise JudgeModelError(f"judge model call failed: {type(exc).__name__}: {exc}") from exc
        tries += 1
        value = _parse(last, needs)
        if value is not None:
            return value
        keys = ", ".join(needs)
        messages += [
            {"role": "assistant", "content": last},
            {"role": "user", "content": "Answer with one JSON object only, as asked"
             + (f", with the keys {keys}." if keys else ".")},
        ]  # fmt: skip
    asked = f"with the keys {', '.join(needs)}" if needs else "as asked"
    what = "an empty answer" if not last.strip() else f"no JSON object {asked}: {last[:200]!r}"
    raise JudgeModelError(f"judge model gave {what} ({attempts} tries)")
