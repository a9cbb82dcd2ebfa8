"""Compaction: summary, observation masking, tool-output clearing, hybrid, none.

The context is the system prompt plus *units*: an assistant message with its tool calls and
the tool results answering them form one unit, every other message is a unit of its own, so
no policy ever separates a tool call from its result. After a compaction the context is
below the trigger threshold (older units are dropped as a last resort) and, for summaries,
holds each of the preset's sections.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.orchestrator.context.tokens import TokenCounter
from services.orchestrator.harness.config import ContextPolicy

Message = dict[str, Any]


@dataclass
class Summary:
    """A summarising model call's answer and what it cost (counted against the budgets)."""

    text: str
    usage: dict[str, int] = field(default_factory=dict)
    model: str = ""
    latency_ms: float | None = None


Summarize = Callable[[list[Message], str], "str | Summary"]


def units(messages: list[Message]) -> list[list[Message]]:
    """Group messages (system prompt excluded) into atomic units."""
    out: list[list[Message]] = []
    for m in messages:
        if m.get("role") == "tool" and out and _open_calls(out[-1]):
            out[-1].append(m)
        else:
            out.append([m])
    return out


def _open_calls(unit: list[Message]) -> bool:
    head = unit[0]
    return head.get("role") == "assistant" and bool(head.get("tool_calls"))


def flatten(groups: list[list[Message]]) -> list[Message]:
    return [m for g in groups for m in g]


def calls_paired(messages: list[Message]) -> bool:
    """Every tool call has its result right after it, and every result follows its call."""
    pending: set[str] = set()
    for m in messages:
        if m.get("role") == "assistant":
            if pending:
                return False
            pending = {c["id"] for c in m.get("tool_calls") or []}
        elif m.get("role") == "tool":
            if m.get("tool_call_id") not in pending:
                return False
            pending.discard(m["tool_call_id"])
        elif pending:
            return False
    return not pending


def section_heading(section: str) -> str:
    return section if section.startswith("<") else f"## {section}"


def has_sections(text: str, sections: list[str]) -> bool:
    return all(section_heading(s) in text for s in sections)


def ensure_sections(text: str, sections: list[str]) -> str:
    """Add an empty heading for every section the summariser left out."""
    missing = [s for s in sections if section_heading(s) not in text]
    extra = []
    for s in missing:
        if s.startswith("<"):
            close = "</" + s[1:]
            extra.append(f"{s}\n(not stated)\n{close}")
        else:
            extra.append(f"## {s}\n(not stated)")
    return (text.strip() + "\n\n" + "\n\n".join(extra)).strip() if extra else text.strip()


def summary_prompt(cfg: ContextPolicy) -> str:
    if not cfg.summary_sections:
        return cfg.summary_prompt
    heads = "\n".join(section_heading(s) for s in cfg.summary_sections)
    return f"{cfg.summary_prompt}\n\nUse exactly these sections, in this order:\n{heads}"


@dataclass
class Compaction:
    kind: str
    messages: list[Message]
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    dropped_units: int = 0
    masked: int = 0
    notes: list[str] = field(default_factory=list)
    call: Summary | None = None  # the summarising model call, when one was made


class Strategy:
    """One compaction policy (``ContextPolicy.policy`` names it); registered with
    :func:`strategy`, found by name, so a new policy is a new class, not another branch."""

    name = ""
    compacts = True  # False: the context is never compacted (needed() is always False)

    def compact(
        self, c: Compactor, messages: list[Message], before: int, number: int
    ) -> Compaction:
        raise NotImplementedError


STRATEGIES: dict[str, type[Strategy]] = {}


def strategy(name: str) -> Callable[[type[Strategy]], type[Strategy]]:
    """Register a :class:`Strategy` subclass under the policy name a harness gives."""

    def register(cls: type[Strategy]) -> type[Strategy]:
        cls.name = name
        STRATEGIES[name] = cls
        return cls

    return register


def strategy_for(name: str) -> Strategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ValueError(
            f"unknown compaction policy {name!r}; known: {sorted(STRATEGIES)}"
        ) from None


@strategy("none")
class NoCompaction(Strategy):
    """The context grows until the window refuses it."""

    compacts = False

    def compact(
        self, c: Compactor, messages: list[Message], before: int, number: int
    ) -> Compaction:
        return Compaction("none", list(messages), before, before)


@strategy("summary")
class SummaryStrategy(Strategy):
    """The middle of the context becomes one summary (head and tail kept as the preset says)."""

    def compact(
        self, c: Compactor, messages: list[Message], before: int, number: int
    ) -> Compaction:
        return c._summary(messages, before)


@strategy("masking")
class MaskingStrategy(Strategy):
    """Oldest tool results replaced by a placeholder until the context fits."""

    def compact(
        self, c: Compactor, messages: list[Message], before: int, number: int
    ) -> Compaction:
        return c._mask(messages, before, clear_only_long=False)


@strategy("clearing")
class ClearingStrategy(Strategy):
    """Every old tool output longer than ``clear_min_chars`` cleared."""

    def compact(
        self, c: Compactor, messages: list[Message], before: int, number: int
    ) -> Compaction:
        return c._mask(messages, before, clear_only_long=True)


@strategy("hybrid")
class HybridStrategy(Strategy):
    """Masking, with a summary every ``summary_every``-th time or when masking falls short."""

    def compact(
        self, c: Compactor, messages: list[Message], before: int, number: int
    ) -> Compaction:
        out = c._mask(messages, before, clear_only_long=False, drop=False)
        if (number + 1) % c.cfg.summary_every == 0 or out.tokens_after >= c.threshold:
            summarised = c._summary(out.messages, before)
            summarised.kind = "hybrid"
            summarised.masked = out.masked
            return summarised
        out.kind = "hybrid"
        return out


class Compactor:
    def __init__(
        self,
        cfg: ContextPolicy,
        window: int,
        counter: TokenCounter,
        summarize: Summarize,
        tools: list[dict[str, Any]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.window = window
        self.counter = counter
        self.summarize = summarize
        self.tools = tools or []

    @property
    def strategy(self) -> Strategy:
        """The registered strategy the policy names (looked up each time: strategies hold no
        state, and a harness edited in place takes effect)."""
        return strategy_for(self.cfg.policy)

    @property
    def threshold(self) -> int:
        return self.cfg.trigger.threshold(self.window)

    def count(self, messages: list[Message]) -> int:
        return self.counter.count(messages, self.tools)

    def size(self, messages: list[Message]) -> int:
        """Tokens of these messages alone (a unit of the tail: the tool schemas are counted
        once, in the context's total, never once per message)."""
        return self.counter.count(messages, [])

    def _head(self, groups: list[list[Message]]) -> int:
        """Units kept verbatim at the start: the preset's head, and the task if pinned."""
        head = min(self.cfg.keep.head_messages, len(groups))
        if self.cfg.keep.task and head == 0 and groups and groups[0][0].get("role") == "user":
            head = 1
        return head

    def needed(self, messages: list[Message], tokens: int | None = None) -> bool:
        if not self.strategy.compacts:
            return False
        return (tokens if tokens is not None else self.count(messages)) >= self.threshold

    def compact(self, messages: list[Message], number: int = 0) -> Compaction:
        """Compact ``messages`` (system prompt first); ``number`` = compactions so far."""
        return self.strategy.compact(self, messages, self.count(messages), number)

    # -- the strategies' building blocks ---------------------------------------------------------

    def _split(self, messages: list[Message]) -> tuple[Message, list[list[Message]]]:
        return messages[0], units(messages[1:])

    def _mask(
        self, messages: list[Message], before: int, *, clear_only_long: bool, drop: bool = True
    ) -> Compaction:
        system, groups = self._split(messages)
        groups = [[dict(m) for m in g] for g in groups]
        results = [m for g in groups for m in g if m.get("role") == "tool"]
        keep = self.cfg.keep_tool_results
        candidates = results[: max(0, len(results) - keep)]
        masked = 0
        placeholder = self.cfg.placeholder
        current = before
        for m in candidates:
            content = m.get("content") or ""
            if content == placeholder:
                continue
            if clear_only_long and len(content) <= self.cfg.clear_min_chars:
                continue
            m["content"] = placeholder
            masked += 1
            if not clear_only_long:
                current = self.count([system, *flatten(groups)])
                if current < self.threshold:
                    break
        out = [system, *flatten(groups)]
        kind = "clearing" if clear_only_long else "masking"
        comp = Compaction(kind, out, before, self.count(out), masked=masked)
        if drop:
            self._drop_until_fits(comp, system, groups)
        return comp

    def _drop_until_fits(
        self, comp: Compaction, system: Message, groups: list[list[Message]]
    ) -> None:
        head = self._head(groups)
        while comp.tokens_after >= self.threshold and len(groups) > head + 1:
            groups.pop(head)
            comp.dropped_units += 1
            comp.messages = [system, *flatten(groups)]
            comp.tokens_after = self.count(comp.messages)
        if comp.dropped_units:
            comp.notes.append(f"dropped {comp.dropped_units} oldest units to fit")

    def _tail_start(self, groups: list[list[Message]], head: int, budget: int) -> int:
        keep = self.cfg.keep
        start = len(groups)
        n_msgs = n_user = 0
        used = 0
        while start > head:
            unit = groups[start - 1]
            size = self.size(unit) if unit else 0
            must = n_msgs < keep.tail_messages or n_user < keep.tail_user_turns
            if not must and used + size > budget:
                break
            start -= 1
            used += size
            n_msgs += len(unit)
            n_user += unit[0].get("role") == "user"
        return start

    def _summary(self, messages: list[Message], before: int) -> Compaction:
        system, groups = self._split(messages)
        cfg = self.cfg
        head = self._head(groups)
        base = self.count([system, *flatten(groups[:head])])
        reserve = max(self.window // 10, 64)  # room for the summary itself
        budget = max(
            0, min(int(self.window * cfg.keep.tail_fraction), self.threshold - base - reserve)
        )
        start = (
            self._tail_start(groups, head, budget)
            if (cfg.keep.tail_messages or cfg.keep.tail_user_turns or cfg.keep.tail_fraction)
            else len(groups)
        )
        start = max(start, head)
        middle = flatten(groups[head:start])
        if not middle and start < len(groups):
            start += 1  # nothing older to summarise: summarise the oldest kept unit
            middle = flatten(groups[head:start])
        answer = self.summarize(middle, summary_prompt(cfg))
        call = answer if isinstance(answer, Summary) else None
        text = answer.text if isinstance(answer, Summary) else answer
        text = ensure_sections(_strip_thinking(text), cfg.summary_sections)
        tail = groups[start:]
        keep_head = [system, *flatten(groups[:head])]
        restated = self._latest_user(groups[head:start])
        comp = Compaction("summary", [], before, 0, summary=text, call=call)

        def rebuild(summary: str) -> None:
            msg = {"role": cfg.summary_role, "content": cfg.summary_prefix + summary}
            comp.summary = summary
            comp.messages = [*keep_head, msg, *restated, *flatten(tail)]
            comp.tokens_after = self.count(comp.messages)

        rebuild(text)

        # Too long: shorten the summary first (headings always stay), then drop old tail units.
        cut = len(text)
        while comp.tokens_after >= self.threshold and cut > 0:
            cut //= 2
            rebuild(ensure_sections(text[:cut], cfg.summary_sections))
            comp.notes.append(f"summary cut to {cut} characters to fit")
        while comp.tokens_after >= self.threshold and tail:
            tail.pop(0)
            comp.dropped_units += 1
            rebuild(comp.summary or "")
        return comp

    def _latest_user(self, summarised: list[list[Message]]) -> list[Message]:
        """The newest user message among the summarised units (the latest clock notice), when
        the preset restates it: the summary alone would lose what the agent was just told."""
        if not self.cfg.keep.latest_user:
            return []
        prefix = self.cfg.summary_prefix
        for unit in reversed(summarised):
            m = unit[0]
            if m.get("role") == "user" and not str(m.get("content") or "").startswith(prefix):
                return [m]
        return []


_THINK = re.compile(r"<think>.*?</think>", re.S)


def _strip_thinking(text: str) -> str:
    return _THINK.sub("", text or "")
