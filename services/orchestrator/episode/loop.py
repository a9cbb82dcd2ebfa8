"""The agent loop, one persisted unit of work at a time.

Each :meth:`Loop.tick` does one thing — call the model, run one tool call, move the world
clock, compact, or score — and leaves the episode's state (an :class:`EpisodeState`) consistent, so the
runner can persist it after every tick and a new worker can continue from there. Malformed
arguments, unknown tools, bad arguments, timeouts and sandbox errors become error
observations; side-effecting calls go through the :class:`Journal` (idempotency keys), so a
resumed episode never runs one twice.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from services.orchestrator.context.compaction import Compactor, calls_paired
from services.orchestrator.episode.policy import Turn, View
from services.orchestrator.episode.state import ClockTarget, EpisodeState
from services.orchestrator.episode.stop import Outcome
from services.orchestrator.harness.config import HarnessConfig
from services.orchestrator.tools.base import Tool, ToolFailure, ToolSet, parse_arguments
from services.orchestrator.tools.builtin import ToolContext

if TYPE_CHECKING:
    from services.orchestrator.episode.protocols import Policy

MAX_POLICY_FAILURES = 3


class Journal(Protocol):
    """Durable record of side-effecting calls by idempotency key."""

    def get(self, key: str) -> dict[str, Any] | None: ...
    def start(self, key: str, tool: str, effect: str, pre_hash: str | None) -> None: ...
    def finish(self, key: str, observation: str, is_error: bool) -> None: ...


class MemoryJournal:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.rows.get(key)

    def start(self, key: str, tool: str, effect: str, pre_hash: str | None) -> None:
        row = self.rows.setdefault(key, {"tool": tool, "effect": effect, "runs": 0})
        row.update(status="started", pre_hash=pre_hash)
        row["runs"] += 1

    def finish(self, key: str, observation: str, is_error: bool) -> None:
        self.rows[key].update(status="done", observation=observation, is_error=is_error)


@dataclass
class World:
    """The episode's world in the tools service (absent for free-instruction episodes)."""

    client: Any  # ToolsClient
    id: str
    token: str
    end: datetime
    start: datetime

    def now(self) -> datetime:
        return self.client.clock(self.id).now

    def state_hash(self) -> str:
        return self.client.state(self.id, tables=False).state_hash

    def events(self) -> list[dict[str, Any]]:
        return [e.model_dump(mode="json") for e in self.client.events(self.id).events]

    def check_status(self) -> dict[str, bool]:
        """Every check's verdict as of now, keyed ``event/check`` (the report's evidence)."""
        report = self.client.checks(self.id)
        return {f"{e.event_id}/{c.id}": c.passed for e in report.events for c in e.checks}


@dataclass
class Runtime:
    harness: HarnessConfig
    tools: ToolSet
    ctx: ToolContext
    policy: Policy
    compactor: Compactor
    journal: Journal
    world: World | None = None
    names: dict[str, str] = field(default_factory=dict)
    episode_id: str = "episode"


Emit = Callable[[str, dict[str, Any]], None]


class Loop:
    def __init__(
        self, rt: Runtime, state: EpisodeState, emit: Emit, check_evidence: bool = False
    ) -> None:
        """``check_evidence``: record on each world call and clock move the checks' verdicts it
        flipped (a few reads of the world each), so the report can name the deciding action."""
        self.rt = rt
        self.evidence = check_evidence
        self.s = state
        self.emit = emit
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        rt.ctx.scratch = state.scratch
        self._seen: dict[str, bool] | None = None  # the checks' verdicts, when known
        self._checks: dict[str, Any] | None = None  # what the last world call changed

    @property
    def done(self) -> bool:
        if self.s.phase != "loop" and self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        return self.s.phase != "loop"

    # -- the tick ---------------------------------------------------------------------------

    def tick(self) -> None:
        began = time.monotonic()
        try:
            self._tick()
        finally:
            self.s.wall_s += time.monotonic() - began

    def _tick(self) -> None:
        s = self.s
        if s.pending_index < len(s.pending):
            self._execute_next()
            self._run_local_calls()
            return
        if s.turn_ended:
            self._end_turn()
            return
        reason = self._over_budget()
        if reason:
            if reason is Outcome.policy_error:
                s.exit_detail = s.policy_error
            self.finish(reason)
            return
        tokens = self.rt.compactor.count(s.messages)
        s.tokens = tokens
        failing = s.compaction_failures >= self.rt.harness.context.max_failures
        if not failing and self.rt.compactor.needed(s.messages, tokens):
            self._compact()
            return
        self._call_model()
        self._run_local_calls()

    def _run_local_calls(self) -> None:
        """Run the pending calls that touch nothing outside the episode in this same tick:
        redoing them after a crash is harmless, so they need no commit of their own. A call
        with effects is left for its own tick, after the turn that asked for it is stored."""
        s = self.s
        while s.pending_index < len(s.pending):
            tool = self.rt.tools.get(s.pending[s.pending_index]["name"])
            if tool is not None and tool.effect in ("world", "sandbox"):
                return
            self._execute_next()

    def finish(self, reason: Outcome) -> None:
        self.s.exit_reason = Outcome(reason).value
        self.s.phase = "scoring"

    def _over_budget(self) -> Outcome | None:
        b = self.rt.harness.budgets
        s = self.s
        if s.step >= b.max_steps:
            return Outcome.max_steps
        if s.usage.total >= b.max_tokens:
            return Outcome.max_tokens
        if s.wall_s >= b.max_wall_s:
            return Outcome.max_wall_s
        if s.policy_failures >= MAX_POLICY_FAILURES:
            return Outcome.policy_error
        return None

    # -- model --------------------------------------------------------------------------------

    def _call_model(self) -> None:
        s, rt = self.s, self.rt
        view = View(
            messages=s.messages,
            tools=rt.tools.specs(),
            step=s.step,
            cursor=s.cursor,
            names=rt.names,
            max_tokens=rt.harness.budgets.max_output_tokens,
            reasoning_effort=rt.harness.reasoning_effort,
        )
        began = time.monotonic()
        try:
            turn: Turn = rt.policy.act(view)
        except Exception as exc:  # noqa: BLE001 - an endpoint failure is recorded, then retried
            s.policy_failures += 1
            s.policy_error = f"{type(exc).__name__}: {exc}"[:2000]
            self.emit("error", {"where": "policy", "message": s.policy_error})
            return
        latency_ms = round((time.monotonic() - began) * 1000, 3)
        s.policy_failures, s.policy_error = 0, None
        s.step += 1
        s.day_steps += 1
        s.usage.prompt_tokens += int(turn.usage.get("prompt_tokens", 0))
        s.usage.completion_tokens += int(turn.usage.get("completion_tokens", 0))
        msg = turn.message()
        s.messages.append(msg)
        self.emit(
            "assistant",
            {
                "step": s.step,
                "message": msg,
                "reasoning": turn.reasoning,
                "usage": turn.usage,
                "model": turn.model,
                "finish_reason": turn.finish_reason,
                "token_ids": turn.token_ids,
                "logprobs": turn.logprobs,
                "prompt_tokens_counted": s.tokens,
                "options": turn.options,
                "latency_ms": latency_ms,
            },
        )
        if turn.tool_calls:
            s.pending = [dict(c) for c in turn.tool_calls]
            s.pending_index = 0
            s.pending_step = s.step
        else:
            s.pending, s.pending_index = [], 0
            s.turn_ended = True
            s.wake_at = turn.wake_at

    # -- tools --------------------------------------------------------------------------------

    def _execute_next(self) -> None:
        s, rt = self.s, self.rt
        i = s.pending_index
        call = s.pending[i]
        key = f"{rt.episode_id}:{s.pending_step}:{i}"
        self._checks = None
        began = time.monotonic()
        observation, is_error, replayed = self._observe(call, key)
        duration_ms = round((time.monotonic() - began) * 1000, 3)
        s.messages.append({"role": "tool", "tool_call_id": call["id"], "content": observation})
        self.emit(
            "tool",
            {
                "step": s.pending_step,
                "call_id": call["id"],
                "name": call["name"],
                "arguments": call["arguments"],
                "observation": observation,
                "is_error": is_error,
                "idempotency_key": key,
                "replayed": replayed,
                "duration_ms": duration_ms,
                **({"checks": self._checks} if self._checks is not None else {}),
            },
        )
        s.pending_index = i + 1
        if s.pending_index >= len(s.pending):
            s.pending, s.pending_index = [], 0
            if s.day_steps >= rt.harness.budgets.steps_per_day:
                s.turn_ended = True

    def _observe(self, call: dict[str, Any], key: str) -> tuple[str, bool, bool]:
        rt = self.rt
        tool = rt.tools.get(call["name"])
        if tool is None:
            names = ", ".join(rt.tools.names())
            return f"Error: unknown tool {call['name']!r}. Available tools: {names}", True, False
        try:
            args = tool.validate(parse_arguments(call["arguments"]))
        except ToolFailure as exc:
            return f"Error: {exc}", True, False
        if tool.effect not in ("world", "sandbox"):
            return self._run(tool, args)
        row = rt.journal.get(key)
        if row is not None and row.get("status") == "done":
            return row["observation"], row["is_error"], True
        if row is not None and row.get("status") == "started":
            if tool.effect == "world" and rt.world is not None:
                if rt.world.state_hash() != row.get("pre_hash"):
                    obs = "(the call completed, but its result was lost when the worker stopped)"
                    rt.journal.finish(key, obs, False)
                    return obs, False, True
            else:
                obs = "Error: interrupted when the worker running it stopped; not repeated."
                rt.journal.finish(key, obs, True)
                return obs, True, True
        pre = rt.world.state_hash() if tool.effect == "world" and rt.world else None
        evidence = tool.effect == "world" and rt.world is not None and self.evidence
        before = self._check_status() if evidence else None
        rt.journal.start(key, tool.name, tool.effect, pre)
        observation, is_error, _ = self._run(tool, args)
        rt.journal.finish(key, observation, is_error)
        if evidence:
            self._checks = self._checks_moved(before)
        return observation, is_error, False

    # -- the checks' evidence (the report puts a verdict on the call that decided it) ---------
    # Within one loop the world changes only by its world calls and clock moves, so the
    # verdicts after one are the verdicts before the next: one read of the checks each.

    def _check_status(self) -> tuple[dict[str, bool], bool] | None:
        """(every check's verdict now, whether it was read now rather than carried over);
        None when the checks cannot be read (the action then goes unrecorded, never fails)."""
        if self._seen is not None:
            return self._seen, False
        try:
            self._seen = self.rt.world.check_status()  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - evidence for the report, not part of the run
            return None
        return self._seen, True

    def _checks_moved(self, before: tuple[dict[str, bool], bool] | None) -> dict[str, Any] | None:
        """The verdicts an action flipped (and, read anew after a restart, all of them before
        it, so a reader never credits an action with a flip it did not see)."""
        self._seen = None
        if before is None:  # unrecorded: the next record starts with a fresh read
            return None
        now = self._check_status()
        if now is None:
            return None
        old, fetched = before
        out: dict[str, Any] = {"flipped": {k: v for k, v in now[0].items() if old.get(k) != v}}
        if fetched:
            out["before"] = old
        return out

    def _run(self, tool: Tool, args: Any) -> tuple[str, bool, bool]:
        """Run on the loop's tool thread, so a call that hangs times out (the stuck thread is
        then abandoned and the next call gets a fresh one); state tools run inline."""
        timeout = self.rt.harness.budgets.tool_timeout_s
        if tool.effect == "state":  # the episode's own state (todos, memory): no I/O to wait on
            try:
                return str(tool.run(self.rt.ctx, args)), False, False
            except ToolFailure as exc:
                return f"Error: {exc}", True, False
            except Exception as exc:  # noqa: BLE001 - any tool failure is an observation
                return f"Error: {tool.name} failed: {type(exc).__name__}: {exc}", True, False
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tool")
        future = self._pool.submit(tool.run, self.rt.ctx, args)
        try:
            return str(future.result(timeout=timeout)), False, False
        except concurrent.futures.TimeoutError:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            return f"Error: {tool.name} timed out after {timeout:g} s", True, False
        except ToolFailure as exc:
            return f"Error: {exc}", True, False
        except Exception as exc:  # noqa: BLE001 - any tool failure is an observation
            return f"Error: {tool.name} failed: {type(exc).__name__}: {exc}", True, False

    # -- clock --------------------------------------------------------------------------------

    def _end_turn(self) -> None:
        """Move the world clock, in two ticks: the first decides where to (and is persisted),
        the second moves it there. A worker killed after the move but before its persist is
        resumed with the same target, and moving to where the clock already is does nothing,
        so the clock never moves twice."""
        s, w = self.s, self.rt.world
        if w is None:
            s.turn_ended = False
            self.finish(Outcome.completed)
            return
        plan = s.clock_target
        if plan is None:
            events = w.client.events(w.id).events
            now = w.now()
            due = sorted(e.due_at for e in events if e.status == "due" and e.due_at is not None)
            if s.wake_at:  # the policy asked to be woken then (a scripted solver)
                due = sorted([*due, max(datetime.fromisoformat(s.wake_at), now)])
                s.wake_at = None
            end = not due or due[0] > w.end
            target = w.end if end else max(due[0], now)
            s.clock_target = ClockTarget(before=now, to=target, end=end)
            return
        s.turn_ended = False
        s.clock_target = None
        before, target = plan.before, plan.to
        if plan.end:
            if before < w.end:
                _, checks = self._advance(w.end)
                self._clock_item(before, w.end, checks=checks)
            self.finish(Outcome.scenario_end)
            return
        out, checks = self._advance(target)
        s.day = (target.date() - w.start.date()).days + 1
        self._clock_item(before, target, fired=out.fired, checks=checks)
        s.day_steps = 0  # a fresh step budget after every move of the clock
        fired = len(out.fired)
        note = f"{fired} new item(s) arrived" if fired else "Nothing new has arrived yet"
        notice = {
            "role": "user",
            "content": f"[World clock: {target.strftime('%A %Y-%m-%d %H:%M')}] {note}. "
            "Check your mail, chat and calendar and handle what needs handling; "
            "say when you are done for now.",
        }
        s.messages.append(notice)
        self.emit("user", {"message": notice})

    def _advance(self, to: datetime) -> tuple[Any, dict[str, Any] | None]:
        """Move the clock (with the verdicts the move flipped: events arriving, deadlines
        passing, when the loop records them)."""
        w = self.rt.world
        assert w is not None
        if not self.evidence:
            return w.client.advance(w.id, to=to.isoformat()), None
        before = self._check_status()
        out = w.client.advance(w.id, to=to.isoformat())
        return out, self._checks_moved(before)

    def _clock_item(
        self,
        before: datetime,
        after: datetime,
        fired: list | None = None,
        checks: dict[str, Any] | None = None,
    ) -> None:
        self.s.clock = after.isoformat()
        self.emit(
            "clock",
            {
                "from": before.isoformat(),
                "to": after.isoformat(),
                "day": self.s.day,
                "fired": [f if isinstance(f, str) else f.get("event_id") for f in fired or []],
                **({"checks": checks} if checks is not None else {}),
            },
        )

    # -- compaction ---------------------------------------------------------------------------

    def _compact(self) -> None:
        s, rt = self.s, self.rt
        try:
            out = rt.compactor.compact(s.messages, s.compactions)
        except Exception as exc:  # noqa: BLE001 - a failed compaction is recorded, not fatal
            s.compaction_failures += 1
            self.emit("error", {"where": "compaction", "message": f"{type(exc).__name__}: {exc}"})
            return
        call = out.call
        if call is not None:  # the summary call's tokens count against the budgets too
            s.usage.prompt_tokens += int(call.usage.get("prompt_tokens", 0))
            s.usage.completion_tokens += int(call.usage.get("completion_tokens", 0))
        if out.tokens_after >= rt.compactor.threshold or not calls_paired(out.messages[1:]):
            s.compaction_failures += 1
            self.emit(
                "error",
                {"where": "compaction", "message": f"still {out.tokens_after} tokens after it"},
            )
            return
        s.messages = out.messages
        s.compactions += 1
        s.segment += 1
        s.tokens = out.tokens_after
        self.emit(
            "compaction",
            {
                "policy": out.kind,
                "segment_from": s.segment - 1,
                "segment_to": s.segment,
                "tokens_before": out.tokens_before,
                "tokens_after": out.tokens_after,
                "threshold": rt.compactor.threshold,
                "window": rt.compactor.window,
                "summary": out.summary,
                "masked": out.masked,
                "dropped_units": out.dropped_units,
                "kept_messages": len(out.messages),
                "context": out.messages,
                "counter": rt.compactor.counter.name,
                "usage": call.usage if call else None,
                "model": call.model if call else None,
                "latency_ms": call.latency_ms if call else None,
            },
        )


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)
