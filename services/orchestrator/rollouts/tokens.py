"""Token in, token out: the policy of a rollout sample.

The sample's context is a list of token ids, never text sent again: each model call is a
``/v1/completions`` request whose ``prompt`` is the stored ids plus the ids of what arrived
since (tool observations, clock notices), and its completion ids are appended as they came
back. Only new non-assistant messages are ever tokenised, once, by the endpoint's own chat
template (``/v1/tokenize`` with ``messages``): rendered after a fixed empty prefix and cut at
the prefix's length, so the template's turn framing is the model's and nothing before is
re-tokenised. A resumed sample rebuilds the ids from its stored segments and goes on from them,
so what the model saw is exactly what a run without the pause would have sent.

New tool results follow the assistant turn that called them: they are rendered after a prefix
whose assistant message carries that turn's calls (the template names each result's tool and
index from its call), so the ids sent are the ids a render of the whole conversation has there.

Tool calls are read from the completion text in the model's own chat format (XTML, see
:mod:`~services.orchestrator.rollouts.xtml`), or, for endpoints that write no markers, the
Hermes form ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. With the policy's
``tool_choice`` set, the completion is decoded under the model service's tool grammar
(``tools`` + ``tool_choice`` on ``/v1/completions``) without adding anything to the prompt.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.orchestrator.episode.policy import Turn, View, extractive_summary
from services.orchestrator.rollouts.xtml import is_xtml, parse_turn

CALL_RE = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
#: The fixed prefix new messages are rendered after (its tokens are cut off again); the
#: assistant turn they answer is appended to it with its calls.
PREFIX = [{"role": "system", "content": ""}, {"role": "user", "content": ""}]


@dataclass
class Segment:
    """One assistant segment: the ids added to the context before it (``prompt_ids``), what it
    generated, the logprobs of that and the version that generated it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float | None]  # None: the endpoint gave no logprob for that token
    version: str
    finish_reason: str


@dataclass
class TokenState:
    """The sample's running context as ids, and how many of its messages they cover."""

    ids: list[int] = field(default_factory=list)
    covered: int = 0  # messages of the conversation already in ``ids``

    @classmethod
    def from_segments(cls, segments: list[Segment], covered: int) -> TokenState:
        ids: list[int] = []
        for seg in segments:
            ids += seg.prompt_ids + seg.completion_ids
        return cls(ids, covered)


class EndpointError(Exception):
    """The policy endpoint refused or broke a request."""


def parse_calls(text: str, step: int) -> tuple[str, list[dict[str, Any]], str | None]:
    """(content, calls as {id, name, arguments-as-JSON-string}, reasoning) of a completion."""
    if is_xtml(text):
        turn = parse_turn(text)
        calls = [{"id": f"call_{step}_{i}", **c} for i, c in enumerate(turn.calls)]
        return turn.content, calls, turn.reasoning or None
    calls = []
    for i, m in enumerate(CALL_RE.finditer(text)):
        try:
            body = json.loads(m.group(1))
        except json.JSONDecodeError:
            body = {"name": "invalid_tool_call", "arguments": {"raw": m.group(1)[:2000]}}
        if not isinstance(body, dict):
            body = {"name": "invalid_tool_call", "arguments": {"raw": str(body)[:2000]}}
        args = body.get("arguments", {})
        calls.append(
            {
                "id": f"call_{step}_{i}",
                "name": str(body.get("name", "")),
                "arguments": args if isinstance(args, str) else json.dumps(args),
            }
        )
    return CALL_RE.sub("", text).strip(), calls, None


class TokenPolicy:
    """A policy version behind an OpenAI-compatible completions endpoint, token in token out.
    ``segments`` collects the new segments; the runner stores and clears them each tick."""

    name = "tokens"

    def __init__(
        self,
        base_url: str,
        *,
        version: str,
        model: str | None,
        tokens: TokenState,
        temperature: float = 1.0,
        seed: int | None = None,
        tool_choice: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s, headers=headers)
        self.version = version
        self.model = model
        self.tokens = tokens
        self.temperature = temperature
        self.seed = seed
        self.tool_choice = tool_choice
        self.segments: list[Segment] = []
        self.sections: list[str] = []

    def close(self) -> None:
        self.http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.model:
            body = {"model": self.model, **body}
        resp = self.http.post(path, json=body)
        if resp.status_code >= 400:
            raise EndpointError(f"{path}: {resp.status_code} {resp.text[:500]}")
        return resp.json()

    def render(
        self, messages: list[dict[str, Any]], view: View, answered: dict[str, Any] | None
    ) -> list[int]:
        """The ids of ``messages`` as the template frames them, ready for the next turn: the
        whole first prompt, or what follows ``answered`` (the assistant turn they answer)."""
        common: dict[str, Any] = {"add_generation_prompt": True}
        if view.reasoning_effort:
            common["reasoning_effort"] = view.reasoning_effort
        if answered is None:
            body = {"messages": messages, **common}
            if view.tools:
                body["tools"] = view.tools
            return list(self._post("/tokenize", body)["tokens"])
        turn: dict[str, Any] = {"role": "assistant", "content": ""}
        if answered.get("tool_calls"):
            turn["tool_calls"] = answered["tool_calls"]
        prefix = [*PREFIX, turn]
        full = self._post("/tokenize", {"messages": prefix + messages, **common})["tokens"]
        base = self._post("/tokenize", {**common, "messages": prefix,
                                        "add_generation_prompt": False})["tokens"]  # fmt: skip
        if full[: len(base)] != base:
            raise EndpointError("the chat template does not render messages prefix-stably")
        delta = list(full[len(base) :])
        if self.tokens.ids and base and self.tokens.ids[-1] != base[-1]:
            delta.insert(0, base[-1])  # a turn cut at max_tokens: its end-of-message first
        return delta

    def act(self, view: View) -> Turn:
        covered = self.tokens.covered
        new = [m for m in view.messages[covered:] if m.get("role") != "assistant"]
        delta = self.render(new, view, view.messages[covered - 1] if covered else None)
        prompt = self.tokens.ids + delta
        body: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": view.max_tokens,
            "temperature": self.temperature,
            "logprobs": 0,
            "return_token_ids": True,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        if self.tool_choice and view.tools:
            body["tools"], body["tool_choice"] = view.tools, self.tool_choice
        out = self._post("/completions", body)
        choice = out["choices"][0]
        completion = list(choice.get("token_ids") or [])
        if not completion and choice.get("text"):
            raise EndpointError("the endpoint returned text without token_ids")
        lps = (choice.get("logprobs") or {}).get("token_logprobs") or []
        # one per completion token; None where the endpoint gave none (never 0.0: probability 1)
        logprobs = [float(x) if x is not None else None for x in lps][: len(completion)]
        logprobs += [None] * (len(completion) - len(logprobs))
        finish = choice.get("finish_reason") or "stop"
        self.segments.append(Segment(delta, completion, logprobs, self.version, finish))
        self.tokens.ids = prompt + completion
        self.tokens.covered = len(view.messages) + 1  # and the assistant message the loop adds
        content, calls, reasoning = parse_calls(choice.get("text") or "", view.step + 1)
        return Turn(
            content=content,
            tool_calls=calls,
            reasoning=reasoning,
            usage={"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
            model=out.get("model", self.model or ""),
            finish_reason="tool_calls" if calls else finish,
            token_ids=completion,
            logprobs=logprobs,
            options={k: v for k, v in body.items() if k not in ("prompt", "tools")},
        )

    def summarize(self, messages: list[dict[str, Any]], prompt: str) -> str:
        return extractive_summary(messages, self.sections)
