"""Policies: what produces the agent's turns.

- :class:`OpenAIPolicy`: any OpenAI-compatible endpoint through the official ``openai`` client
  (the model service by default, or any URL + key).
- :class:`OraclePolicy`: the scenario's oracle as tool calls of the episode's own tool set.
- :class:`ScriptedPolicy`: turns from a list or a function (tests, the zero-latency bench).

A turn is an assistant message in OpenAI form (``content``, ``tool_calls`` with JSON-string
arguments) plus usage; summaries for compaction come from the same policy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.orchestrator.context.compaction import Summary


@dataclass
class Turn:
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {id, name, arguments}
    reasoning: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    model: str = ""
    finish_reason: str = "stop"
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    options: dict[str, Any] = field(default_factory=dict)  # request fields as sent
    wake_at: str | None = None  # a scripted policy's next simulated time of interest

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in self.tool_calls
            ]
        return msg


@dataclass
class View:
    """What a policy sees at a step."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    step: int
    cursor: dict[str, Any]  # the policy's own persisted state
    names: dict[str, str]  # "gmail/send_email" -> the harness's tool name
    max_tokens: int = 4096
    reasoning_effort: str | None = None

    def options(self) -> dict[str, Any]:
        """The request fields besides messages, tools and model (what a replay must match)."""
        out: dict[str, Any] = {"max_tokens": self.max_tokens}
        if self.reasoning_effort:
            out["reasoning_effort"] = self.reasoning_effort
        return out


class OpenAIPolicy:
    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str | None,
        *,
        timeout_s: float = 600.0,
        temperature: float | None = None,
        seed: int | None = None,
        tool_choice: str | None = None,
        reasoning_effort: str | None = None,
        summary_max_tokens: int = 1024,
    ) -> None:
        from openai import OpenAI

        self.client = OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout_s,
                             max_retries=2)  # fmt: skip
        self._model = model
        self.temperature = temperature
        self.seed = seed
        self.tool_choice = tool_choice
        self.sections: list[str] = []  # the model writes its own sections (see the prompt)
        self.reasoning_effort = reasoning_effort
        self.summary_max_tokens = summary_max_tokens

    @property
    def model(self) -> str:
        if self._model is None:
            self._model = self.client.models.list().data[0].id
        return self._model

    def act(self, view: View) -> Turn:
        options = view.options()
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.seed is not None:
            options["seed"] = self.seed
        if self.reasoning_effort is not None:
            options["reasoning_effort"] = self.reasoning_effort
        if self.tool_choice is not None and view.tools:
            options["tool_choice"] = self.tool_choice
        kwargs: dict[str, Any] = {"model": self.model, "messages": view.messages, **options}
        if view.tools:
            kwargs["tools"] = view.tools
        resp = self.client.chat.completions.create(**kwargs)
        choice = resp.choices[0]
        msg = choice.message
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments or ""}
            for c in (msg.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        usage = _usage(resp)
        reasoning = getattr(msg, "reasoning_content", None)
        return Turn(
            content=msg.content or "",
            tool_calls=calls,
            reasoning=reasoning,
            usage=usage,
            model=resp.model,
            finish_reason=choice.finish_reason or "stop",
            options=options,
        )

    def summarize(self, messages: list[dict[str, Any]], prompt: str) -> Summary:
        transcript = render_transcript(messages)
        began = time.monotonic()
        resp = self.client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": prompt},
                {"role": "user", "content": transcript},
            ],
            max_tokens=self.summary_max_tokens,
            **({"reasoning_effort": self.reasoning_effort} if self.reasoning_effort else {}),
        )
        usage = _usage(resp)
        return Summary(
            resp.choices[0].message.content or "", usage, resp.model,
            round((time.monotonic() - began) * 1000, 3),
        )  # fmt: skip


def _usage(resp: Any) -> dict[str, int]:
    if resp.usage is None:
        return {}
    return {
        "prompt_tokens": resp.usage.prompt_tokens,
        "completion_tokens": resp.usage.completion_tokens,
    }


def render_transcript(messages: list[dict[str, Any]], limit: int = 400) -> str:
    out = []
    for m in messages:
        text = (m.get("content") or "")[:limit]
        if m.get("tool_calls"):
            calls = ", ".join(
                f"{c['function']['name']}({c['function']['arguments'][:limit]})"
                for c in m["tool_calls"]
            )
            text = (text + f" [calls: {calls}]").strip()
        out.append(f"{m.get('role')}: {text}")
    return "\n".join(out)


def extractive_summary(messages: list[dict[str, Any]], sections: list[str]) -> str:
    """A summary without a model (oracle and scripted policies): what was asked, done, seen."""
    from services.orchestrator.context.compaction import section_heading

    asked = [m.get("content", "")[:300] for m in messages if m.get("role") == "user"]
    done = [
        f"{c['function']['name']} {c['function']['arguments'][:160]}"
        for m in messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]
    seen = [m.get("content", "")[:120] for m in messages if m.get("role") == "tool"][-5:]
    bodies = [
        "\n".join(asked) or "(none)",
        "\n".join(f"- {d}" for d in done) or "(none)",
        "\n".join(seen) or "(none)",
    ]
    parts = []
    for i, s in enumerate(sections or ["Summary"]):
        body = bodies[i % 3] if i < 3 else "(see above)"
        head = section_heading(s)
        close = ("\n</" + s[1:]) if s.startswith("<") else ""
        parts.append(f"{head}\n{body}{close}")
    return "\n\n".join(parts)


class OraclePolicy:
    """The tools service's oracle plan (``GET /scenarios/{name}/oracle``: MCP tool calls with
    concrete arguments, each at a simulated time) played as this harness's own tool calls: one
    call per turn once the world clock has reached its time; otherwise "done for now", asking
    the loop to wake it at the next step's time. Its cursor is the index of the next step."""

    name = "oracle"

    def __init__(self, plan: dict[str, Any], now: Callable[[], datetime]) -> None:
        self.steps = plan["steps"]
        self.now = now
        self.sections: list[str] = []

    def act(self, view: View) -> Turn:
        i = view.cursor.get("next", 0)
        while i < len(self.steps):
            step = self.steps[i]
            name = view.names.get(f"{step['app']}/{step['tool']}")
            if name is None:  # a tool this episode does not offer: the step is skipped
                view.cursor.setdefault("skipped", []).append(i)
                i += 1
                continue
            at = datetime.fromisoformat(step["at"])
            if at > self.now():
                view.cursor["next"] = i
                return Turn(content="Done for now.", options=view.options(), wake_at=step["at"])
            view.cursor["next"] = i + 1
            return Turn(
                tool_calls=[
                    {"id": f"call_oracle_{i + 1}", "name": name,
                     "arguments": json.dumps(step["arguments"])}
                ],
                finish_reason="tool_calls",
                options=view.options(),
            )  # fmt: skip
        view.cursor["next"] = i
        return Turn(content="Everything is handled. Done for now.", options=view.options())

    def summarize(self, messages: list[dict[str, Any]], prompt: str) -> str:
        return extractive_summary(messages, self.sections)


class ScriptedPolicy:
    """Turns from ``script(view) -> Turn``; summaries from ``summarizer`` or extractive."""

    name = "scripted"

    def __init__(
        self,
        script: Callable[[View], Turn],
        summarizer: Callable[[list[dict[str, Any]], str], str] | None = None,
    ) -> None:
        self.script = script
        self.summarizer = summarizer
        self.sections: list[str] = []

    def act(self, view: View) -> Turn:
        return self.script(view)

    def summarize(self, messages: list[dict[str, Any]], prompt: str) -> str:
        if self.summarizer is not None:
            return self.summarizer(messages, prompt)
        return extractive_summary(messages, self.sections)
