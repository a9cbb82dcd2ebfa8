"""Running one rollout sample on a worker, one persisted tick at a time.

The sample's loop is the episode loop (:class:`~services.orchestrator.episode.loop.Loop`: model
calls, journalled tool calls, budgets) over a forked world and sandbox, with a
:class:`~services.orchestrator.rollouts.tokens.TokenPolicy`. After every tick the loop state
(conversation included), the new token segments and the heartbeat are committed together, on
the condition that the sample is still this run's, so a killed worker loses at most the tick in
flight and its side-effecting calls are never run twice (the journal's idempotency keys).

Partial rollout: once the batch's λ is reached the rollout's ``pause_iteration`` is set; a live
sample sees it after its tick, snapshots its world, digests and pauses its sandbox, and ends
this run as ``paused``. The next iteration resumes it with the same files, world and context
(ids rebuilt from its stored segments), under the new policy version.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any, ClassVar, TypedDict

from sqlalchemy import func, select

from services.orchestrator.context.compaction import Compactor
from services.orchestrator.context.tokens import ApproxTokenCounter
from services.orchestrator.episode.driver import DriverContext, Step, drive
from services.orchestrator.episode.loop import Loop, Runtime, World
from services.orchestrator.episode.platform import Services
from services.orchestrator.episode.recorder import SQLJournal
from services.orchestrator.episode.state import EpisodeState, WorldLease, initial_state
from services.orchestrator.episode.stop import Outcome
from services.orchestrator.episode.store import now_utc
from services.orchestrator.harness.config import load_harness
from services.orchestrator.harness.prompt import render_system_prompt
from services.orchestrator.rollouts.models import RolloutRow, SampleRow, SegmentRow
from services.orchestrator.rollouts.schema import PolicyVersion, RolloutCreate
from services.orchestrator.rollouts.setup import base_setup, fork_setup
from services.orchestrator.rollouts.tokens import Segment, TokenPolicy, TokenState
from services.orchestrator.tools.builtin import ToolContext, toolset_of
from services.orchestrator.tools.mcp import WorldMCP, mcp_name_map, scenario_apps, world_tools
from shared.db import ServiceDatabase
from shared.jobs import JobCancelled, JobFailed

log = logging.getLogger("k3stack.rollouts")
TERMINAL_PHASES = ("finished", "cut", "failed", "cancelled")
NO_COMPACTION = 10**12  # a token stream is never rewritten: compaction would break it
FILES_DIGEST = "find /root -type f -exec md5sum {} + 2>/dev/null | sort"


def segments_of(db: ServiceDatabase, sample_id: str) -> list[Segment]:
    with db.session() as s:
        rows = s.scalars(
            select(SegmentRow).where(SegmentRow.sample_id == sample_id).order_by(SegmentRow.seq)
        ).all()
        return [
            Segment(r.prompt_ids, r.completion_ids, r.logprobs, r.version, r.finish_reason)
            for r in rows
        ]


def files_digest(svc: Services, sandbox_id: str) -> str:
    out = svc.sandbox.exec(sandbox_id, FILES_DIGEST, timeout=60)
    return hashlib.sha256((out.stdout or "").encode()).hexdigest()


class SampleOutcome(TypedDict, total=False):
    """How a sample's run ended: the job's result."""

    phase: str
    reward: float | None
    exit_reason: str | None
    step: int


def policy_of(roll: RolloutRow) -> PolicyVersion:
    """The policy version serving the rollout's current iteration (its row keeps λ beside)."""
    return PolicyVersion.model_validate({k: v for k, v in roll.policy.items() if k != "lam"})


class SampleDriver:
    """Drives one rollout sample: the episode loop under a token policy, with a pausable phase
    (λ reached, or a newer policy version) at every tick boundary."""

    name: ClassVar[str] = "sample"

    def __init__(self, ctx: DriverContext) -> None:
        self.db, self.svc, self.id = ctx.db, ctx.services, ctx.job.id
        self.owner = ctx.job.owner
        self.seq = 0
        self._mcp: WorldMCP | None = None  # the run's MCP sessions with the world
        self.result: SampleOutcome = {}  # what the job ends with
        self._rt: Runtime | None = None
        self._loop: Loop | None = None
        self._cut = False  # over its effort budget
        self._budget: int | None = None
        self._start_state: EpisodeState | None = None
        self._phase = "pending"
        self._request: RolloutCreate | None = None
        self._policy: PolicyVersion | None = None
        self.iteration = 0
        self._rollout_id = ""
        self._index = 0

    def run(self) -> SampleOutcome:
        """The sample's run (the task's body): a sample already ended or parked before it
        began returns at once; else it is driven to its end or its next pause."""
        try:
            return self._run()
        except JobCancelled:
            release_cancelled(self.db, self.svc, self.id)
            raise
        except JobFailed:
            raise
        except Exception:  # a sample that cannot go on counts as done for λ (phase failed)
            try:
                self._set_phase("failed")
                reached_lambda(self.db, self.id)
            except JobCancelled:
                pass
            raise

    def _run(self) -> SampleOutcome:
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            roll = s.get(RolloutRow, row.rollout_id)
            self._request = RolloutCreate.model_validate(roll.request)
            phase, state = row.phase, EpisodeState.of(row.state) if row.state else None
            self.iteration, paused_at = roll.iteration, roll.pause_iteration
            self._policy = policy_of(roll)
            self._rollout_id, self._index = row.rollout_id, row.task_index
            row.iteration = self.iteration
        if phase in TERMINAL_PHASES:
            return {"phase": phase}
        if paused_at >= self.iteration and state is None:  # λ reached before this one began
            self._set_phase("paused", {"before_start": True, "iteration": self.iteration})
            return {"phase": "paused"}
        self._phase, self._start_state = phase, state
        drive(self)
        return self.result

    # -- the protocol ------------------------------------------------------------------------

    def start(self) -> EpisodeState:
        request, policy = self._request, self._policy
        assert request is not None and policy is not None, "start before run"
        state = self._start_state
        if state is None:
            state = self._start(request, self._rollout_id, self._index)
        elif self._phase == "paused":
            self._resume()
        self._set_phase("live")
        rt = self._rt = self._runtime(request, state, policy)
        self._budget = request.budgets.effort_budgets.get(request.effort)
        self._loop = Loop(rt, state, lambda kind, body: None)
        with self.db.session() as s:
            self.seq = s.scalar(
                select(func.coalesce(func.max(SegmentRow.seq), 0)).where(
                    SegmentRow.sample_id == self.id
                )
            )
        return state

    def tick(self, state: EpisodeState) -> Step:
        """One loop tick and its commit; then the batch says whether to pause here or to go
        on under a newer policy version."""
        loop, rt, request = self._loop, self._rt, self._request
        assert loop is not None and rt is not None and request is not None, "tick before start"
        if loop.done:
            return Step.done
        loop.tick()
        tp = self._token_policy_now()
        state.covered = tp.tokens.covered
        if self._budget is not None and state.usage.completion_tokens > self._budget:
            state.exit_reason = Outcome.effort_budget.value
            state.exit_detail = (
                f"{state.usage.completion_tokens} completion tokens over the "
                f"{request.effort} budget of {self._budget}"
            )
            self._persist(state, tp, self.iteration)
            self._cut = True
            return Step.done
        signal = self._persist(state, tp, self.iteration)
        if loop.done:
            return Step.done
        if signal == "pause":
            return Step.pause
        if signal == "swap":
            policy, self.iteration = self._swap_version(state, self.iteration)
            tp.close()
            rt.policy = self._token_policy(policy, state)
        return Step.go_on

    def pause(self, state: EpisodeState) -> None:
        self.result = self._pause(state, self.iteration)

    def finish(self, state: EpisodeState) -> None:
        assert self._rt is not None, "finish before start"
        if self._cut:
            self.result = self._finish(state, "cut", -1.0)
        else:
            self.result = self._end(state, self._rt)

    def close(self) -> None:
        if self._rt is not None:
            self._rt.policy.close()
        if self._mcp is not None:
            self._mcp.close()

    def _token_policy_now(self) -> TokenPolicy:
        assert self._rt is not None
        tp = self._rt.policy
        assert isinstance(tp, TokenPolicy)
        return tp

    # -- start / resume ---------------------------------------------------------------------

    def _start(self, request: RolloutCreate, rollout_id: str, index: int) -> EpisodeState:
        task = request.tasks[index]
        base = base_setup(self.db, self.svc, rollout_id, index, task, self.owner)
        forked = fork_setup(self.svc, base)
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            row.world_id, row.world_token = forked.world_id, forked.world_token
            row.sandbox_id = forked.sandbox_id
        harness = load_harness(request.harness, self.svc.settings.data_dir)
        scenario = None
        if task.scenario:
            scenario = self.svc.tools.scenario(task.scenario, task.seed).model_dump(mode="json")
        now = self.svc.tools.clock(forked.world_id).now.isoformat() if forked.world_id else ""
        environment = {"cwd": "/root", "shell": "sh"} if forked.sandbox_id else {}
        system = render_system_prompt(
            harness.system_prompt, environment=environment, memory={}, skills=[], now=now,
            reasoning_effort=request.effort,
        )  # fmt: skip
        instruction = task.instruction or ""
        if scenario:
            instruction = f"{scenario['description']}\nIt is {now} on the world clock.\n" + (
                task.instruction or ""
            )
        state = initial_state(system, instruction.strip())
        if forked.world_id:
            state.world = WorldLease(id=forked.world_id, token=forked.world_token)
        state.scenario, state.sandbox_id, state.clock = scenario, forked.sandbox_id, now
        return state

    def _resume(self) -> None:
        """The paused sample's sandbox back on; its world checked against the snapshot taken at
        the pause (restored from it if anything moved)."""
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            sandbox_id, world_id, paused = row.sandbox_id, row.world_id, dict(row.paused or {})
        if sandbox_id:
            self.svc.sandbox.resume(sandbox_id)
            paused["resumed_files"] = files_digest(self.svc, sandbox_id)
        if world_id and paused.get("world_snapshot"):
            now_hash = self.svc.tools.state(world_id, tables=False).full_hash
            if now_hash != paused.get("world_hash"):
                self.svc.tools.restore(world_id, paused["world_snapshot"])
                now_hash = self.svc.tools.state(world_id, tables=False).full_hash
            paused["resumed_world_hash"] = now_hash
        with self.db.session() as s:
            s.get(SampleRow, self.id).paused = paused

    def _pause(self, state: EpisodeState, iteration: int) -> SampleOutcome:
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            sandbox_id, world_id = row.sandbox_id, row.world_id
        saved: dict[str, Any] = {"iteration": iteration, "step": state.step,
                                 "at": now_utc().isoformat()}  # fmt: skip
        if world_id:
            snap = self.svc.tools.snapshot(world_id, label=f"pause-{iteration}")
            saved.update(world_snapshot=snap.id, world_hash=snap.state_hash)
        if sandbox_id:
            saved["files"] = files_digest(self.svc, sandbox_id)
            self.svc.sandbox.pause(sandbox_id)
        self._set_phase("paused", saved)
        return {"phase": "paused", "step": state.step}

    # -- the loop ---------------------------------------------------------------------------

    def _runtime(
        self, request: RolloutCreate, state: EpisodeState, policy: PolicyVersion
    ) -> Runtime:
        harness = load_harness(request.harness, self.svc.settings.data_dir)
        harness.budgets.max_steps = request.budgets.max_steps
        harness.budgets.steps_per_day = request.budgets.max_steps
        harness.budgets.max_output_tokens = request.budgets.max_output_tokens
        harness.budgets.max_tokens = NO_COMPACTION
        harness.reasoning_effort = request.effort  # type: ignore[assignment]
        tools = toolset_of(harness.tools)
        world, names = None, {}
        if state.world is not None:
            w, scenario = state.world, state.scenario or {}
            self._mcp = WorldMCP(self.svc.tools, w.id, w.token)
            found = world_tools(self._mcp, scenario_apps(scenario), harness.mcp_tool_name,
                                harness.mcp_name_underscores)  # fmt: skip
            for t in found:
                tools.add(t)
            names = mcp_name_map(found)
            from datetime import datetime

            world = World(self.svc.tools, w.id, w.token,
                          end=datetime.fromisoformat(scenario["end"]),
                          start=datetime.fromisoformat(scenario["start"]))  # fmt: skip
        tp = self._token_policy(policy, state)
        compactor = Compactor(harness.context, NO_COMPACTION, ApproxTokenCounter(),
                              tp.summarize, tools.specs())  # fmt: skip
        ctx = ToolContext(sandbox=self.svc.sandbox if state.sandbox_id else None,
                          sandbox_id=state.sandbox_id, scratch=state.scratch,
                          skills={}, timeout_s=harness.budgets.tool_timeout_s)  # fmt: skip
        return Runtime(harness=harness, tools=tools, ctx=ctx, policy=tp, compactor=compactor,
                       journal=SQLJournal(self.db, self.id), world=world, names=names,
                       episode_id=self.id)  # fmt: skip

    def _token_policy(self, policy: PolicyVersion, state: EpisodeState) -> TokenPolicy:
        """The policy version's endpoint over the sample's context, rebuilt from its stored
        segments (so a version swap or a resume goes on from exactly the ids sent so far)."""
        return TokenPolicy(
            policy.base_url or self.svc.model.openai_base_url, version=policy.version,
            model=policy.model,
            tokens=TokenState.from_segments(segments_of(self.db, self.id), state.covered),
            temperature=policy.temperature, seed=policy.seed, tool_choice=policy.tool_choice,
            api_key=self.svc.settings.model.api_key if not policy.base_url else None,
        )  # fmt: skip

    def _swap_version(self, state: EpisodeState, iteration: int) -> tuple[PolicyVersion, int]:
        """A newer policy version while this sample runs: it pauses here, at a tick boundary
        (world snapshot, sandbox paused), and resumes at once under the new version."""
        self._pause(state, iteration)
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            roll = s.get(RolloutRow, row.rollout_id, with_for_update=True)
            if row.status != "running" or row.owner != self.owner:
                raise JobCancelled(self.id)
            row.iteration = roll.iteration
            row.paused = {
                **(row.paused or {}),
                "swaps": int((row.paused or {}).get("swaps", 0)) + 1,
            }
            history = [dict(h) for h in roll.history or [{}]]
            history[-1]["resumed"] = int(history[-1].get("resumed", 0)) + 1
            roll.history = history
            policy, iteration = policy_of(roll), roll.iteration
        self._resume()
        self._set_phase("live")
        return policy, iteration

    def _persist(self, state: EpisodeState, tp: TokenPolicy, iteration: int) -> str | None:
        """Commit the tick; then "swap" when a newer policy version started meanwhile, "pause"
        when this iteration's λ has been reached, else None."""
        now = now_utc()
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            if row.status != "running" or row.owner != self.owner:
                raise JobCancelled(self.id)
            for seg in tp.segments:
                self.seq += 1
                s.add(SegmentRow(sample_id=self.id, seq=self.seq, prompt_ids=seg.prompt_ids,
                                 completion_ids=seg.completion_ids, logprobs=seg.logprobs,
                                 version=seg.version, iteration=iteration,
                                 finish_reason=seg.finish_reason))  # fmt: skip
            tp.segments.clear()
            row.state = state.model_dump(mode="json")
            row.heartbeat_at = row.updated_at = now
            row.progress_message = f"step {state.step}"
            roll = s.get(RolloutRow, row.rollout_id)
            if roll.iteration > iteration:
                return "swap"
            return "pause" if roll.pause_iteration >= iteration else None

    def _end(self, state: EpisodeState, rt: Runtime) -> SampleOutcome:
        """The loop's outcome decides the phase, the scoring and the job status: a sample that
        failed (``policy_error``) ends phase ``failed`` and its job ``failed``, never
        ``finished`` / ``succeeded``."""
        outcome = Outcome.of(state.exit_reason)
        reward = self._reward(rt) if outcome.scored else None
        if not outcome.failed:
            return self._finish(state, "finished", reward)
        self._finish(state, "failed", reward)
        raise JobFailed(outcome.value, state.exit_detail or outcome.value)

    def _reward(self, rt: Runtime) -> float | None:
        if rt.world is None:
            return None
        checks = self.svc.tools.checks(rt.world.id)
        return checks.events_passed / checks.events_total if checks.events_total else 0.0

    def _finish(self, state: EpisodeState, phase: str, reward: float | None) -> SampleOutcome:
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            if row.status != "running" or row.owner != self.owner:
                raise JobCancelled(self.id)
            row.phase, row.reward, row.updated_at = phase, reward, now_utc()
            row.iteration = s.get(RolloutRow, row.rollout_id).iteration  # λ counts it there
            row.state = state.model_copy(update={"phase": "done"}).model_dump(mode="json")
        self._release()
        reached_lambda(self.db, self.id)
        release_setups(self.db, self.svc, self.id)
        return {"phase": phase, "reward": reward, "exit_reason": state.exit_reason}

    def _release(self) -> None:
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            sandbox_id, world_id = row.sandbox_id, row.world_id
        _release(self.svc, f"sample {self.id}", sandbox_id, world_id)

    def _set_phase(self, phase: str, paused: dict[str, Any] | None = None) -> None:
        with self.db.session() as s:
            row = s.get(SampleRow, self.id)
            if row.status != "running" or row.owner != self.owner:
                raise JobCancelled(self.id)
            row.phase, row.updated_at = phase, now_utc()
            if paused is not None:
                row.paused = {**(row.paused or {}), **paused}


def reached_lambda(db: ServiceDatabase, sample_id: str) -> None:
    """Once ⌈λ x live⌉ samples of this iteration have finished, the rest are told to pause."""
    with db.session() as s:
        row = s.get(SampleRow, sample_id)
        roll = s.get(RolloutRow, row.rollout_id, with_for_update=True)
        it = (roll.history or [{}])[-1]
        done = s.scalar(
            select(func.count()).where(
                SampleRow.rollout_id == roll.id, SampleRow.iteration == roll.iteration,
                SampleRow.phase.in_(TERMINAL_PHASES),
            )
        )  # fmt: skip
        need = math.ceil(float(it.get("lam", 1.0)) * int(it.get("live", 0)) - 1e-9)
        if done >= need and roll.pause_iteration < roll.iteration:
            roll.pause_iteration = roll.iteration


def release_cancelled(db: ServiceDatabase, svc: Services, sample_id: str) -> None:
    """A cancelled sample's world and sandbox go, and the batch's setups once all are done
    (the worker that ran it when it stops, or the API for one that was idle)."""
    with db.session() as s:
        row = s.get(SampleRow, sample_id)
        if row is None or row.phase != "cancelled":
            return
        sandbox_id, world_id = row.sandbox_id, row.world_id
    _release(svc, f"sample {sample_id}", sandbox_id, world_id)
    reached_lambda(db, sample_id)
    release_setups(db, svc, sample_id)


def _release(svc: Services, what: str, sandbox_id: str | None, world_id: str | None) -> None:
    """Kill a sandbox and delete a world; one already gone (404) is fine."""
    from shared.clients import ServiceError

    try:
        if sandbox_id:
            svc.sandbox.kill(sandbox_id)
        if world_id:
            svc.tools.delete_world(world_id)
    except ServiceError as exc:
        if exc.status != 404:
            log.warning("%s: resources not released: %s", what, exc)


def release_setups(db: ServiceDatabase, svc: Services, sample_id: str) -> None:
    """Once every sample of the batch is done, its base setups go too (idempotent)."""
    from services.orchestrator.rollouts.models import SetupRow

    with db.session() as s:
        rid = s.get(SampleRow, sample_id).rollout_id
        open_ = s.scalar(
            select(func.count()).where(
                SampleRow.rollout_id == rid, SampleRow.phase.not_in(TERMINAL_PHASES)
            )
        )
        if open_:
            return
        setups = [(r.world_id, r.sandbox_id) for r in s.scalars(
            select(SetupRow).where(SetupRow.rollout_id == rid, SetupRow.status == "ready"))]  # fmt: skip
    for world_id, sandbox_id in setups:
        _release(svc, f"rollout {rid}'s base setup", sandbox_id, world_id)
