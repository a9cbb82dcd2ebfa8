"""Running one episode on a worker: claim it, build its runtime, tick and persist, score,
write the trajectory and report, release its sandbox and world.

An episode is a job of the shared job model (``shared/jobs.py``): the claim, the heartbeat
thread, attempts, cancellation and the reaper's re-queue / ``worker_lost`` are that model's.
SQL is the source of truth: after every tick the new trajectory items (the context), the tick's
record in the state's journal (what changed in the counters, cursor, pending calls; a snapshot
every few ticks: :mod:`~services.orchestrator.episode.journal`), the progress and the heartbeat
are committed together, on the condition that
the episode is still this run's (``running`` under its owner), so a cancelled or taken-over
episode stops at its next tick. A worker that dies stops its heartbeat; the reaper then puts the
episode back on the queue and the next worker picks it up from its last committed tick.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update

from services.orchestrator.context.compaction import Compactor
from services.orchestrator.context.tokens import ApproxTokenCounter, ModelTokenCounter
from services.orchestrator.episode.journal import StateJournal
from services.orchestrator.episode.loop import Loop, Runtime, World
from services.orchestrator.episode.models import EpisodeRow, ToolCallRow, TrajectoryItemRow
from services.orchestrator.episode.policy import OpenAIPolicy, OraclePolicy
from services.orchestrator.episode.protocols import Policy
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.state import EpisodeState, WorldLease, initial_state
from services.orchestrator.episode.stop import Outcome
from services.orchestrator.harness.config import HarnessConfig, load_harness
from services.orchestrator.harness.memory import harness_skills, memory_context
from services.orchestrator.harness.prompt import render_system_prompt
from services.orchestrator.tools.base import ToolSet
from services.orchestrator.tools.builtin import ToolContext, toolset_of
from services.orchestrator.tools.mcp import WorldMCP, mcp_name_map, scenario_apps, world_tools
from shared.jobs import FINISHED, JobCancelled, JobPolicy, JobRun, JobStore, heartbeats, new_owner

log = logging.getLogger("k3stack.orchestrator")
TERMINAL = tuple(str(s) for s in FINISHED)
TASK_NAME = "orchestrator.run_episode"
QUEUE = "orchestrator"  # the default; K3STACK_ORCHESTRATOR__QUEUE renames it


def episode_queue(settings: Any = None) -> str:
    """The Celery queue episodes are sent to: the one the orchestrator's worker consumes."""
    from shared.settings import get_settings

    return (settings or get_settings()).service_queue("orchestrator")


def now_utc() -> datetime:
    return datetime.now(UTC)


def _aware(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


class EpisodeStore(JobStore):
    """The shared job store over the episodes table. Its timing is the orchestrator's own
    (``K3STACK_ORCHESTRATOR__LEASE_S``, a heartbeat every third of it) and its bound on starts
    ``K3STACK_JOB_MAX_ATTEMPTS``, read when first needed (never at import)."""

    def __init__(self, database: Any, settings: Any = None, **kw: Any) -> None:
        super().__init__(database, EpisodeRow, **kw)
        self._settings = settings

    @property
    def policy(self) -> JobPolicy:
        if self._policy is None:
            from shared.settings import get_settings

            s = self._settings or get_settings()
            lease = s.orchestrator.lease_s
            self._policy = JobPolicy(lease / 3, lease, s.job_max_attempts)
        return self._policy


@dataclass
class Services:
    """The other services, through the shared clients."""

    tools: Any
    sandbox: Any
    model: Any
    settings: Any
    objects: Any = None


class SQLJournal:
    def __init__(self, db: Any, episode_id: str) -> None:
        self.db = db
        self.episode_id = episode_id

    def get(self, key: str) -> dict[str, Any] | None:
        with self.db.session() as s:
            row = s.get(ToolCallRow, key)
            if row is None:
                return None
            return {
                "status": row.status,
                "pre_hash": row.pre_hash,
                "observation": row.observation,
                "is_error": row.is_error,
                "runs": row.runs,
            }

    def start(self, key: str, tool: str, effect: str, pre_hash: str | None) -> None:
        with self.db.session() as s:
            row = s.get(ToolCallRow, key)
            if row is None:
                row = ToolCallRow(
                    key=key, episode_id=self.episode_id, tool=tool, effect=effect,
                    status="started", started_at=now_utc(), runs=0, is_error=False,
                )  # fmt: skip
                s.add(row)
            row.status, row.pre_hash = "started", pre_hash
            row.runs += 1

    def finish(self, key: str, observation: str, is_error: bool) -> None:
        with self.db.session() as s:
            row = s.get(ToolCallRow, key)
            row.status, row.observation, row.is_error = "done", observation, is_error


class ContextTooSmall(Exception):
    """The fixed part of the context alone does not fit the model's window."""


def scenario_from_items(db: Any, episode_id: str) -> dict[str, Any] | None:
    """The scenario instance the episode was set up with (its ``scenario`` item)."""
    with db.session() as s:
        body = s.scalars(
            select(TrajectoryItemRow.body).where(
                TrajectoryItemRow.episode_id == episode_id, TrajectoryItemRow.kind == "scenario"
            )
        ).first()
    return (body or {}).get("scenario")


def context_from_items(db: Any, episode_id: str) -> list[dict[str, Any]]:
    """The context the next model call sends, replayed from the trajectory's items."""
    from services.orchestrator.episode.export import to_shared, trajectory

    doc = trajectory(db, episode_id)
    return [m.model_dump(mode="json", exclude_none=True) for m in to_shared(doc).context()]


class EpisodeRunner:
    def __init__(
        self, db: Any, services: Services, episode_id: str, policy: Policy | None = None
    ) -> None:
        self.db = db
        self.svc = services
        self.id = episode_id
        self.store = EpisodeStore(db, services.settings)
        self.owner = ""
        self.policy_override = policy
        self.items: list[tuple[str, dict[str, Any], datetime, int]] = []
        self.seq: int | None = None
        self.max_steps = 1
        self._segment = 0
        self.journal = StateJournal(episode_id)
        self._mcp: WorldMCP | None = None  # the run's MCP sessions with the world

    # -- run -----------------------------------------------------------------------------------

    def run(self, job: JobRun | None = None) -> None:
        """Run the episode as ``job`` (a claimed run: the Celery task's), or claim it here and
        keep its heartbeat (an in-process run) — the same claim either way."""
        if job is not None:
            self._run(job)
            return
        owner = new_owner()
        claim = self.store.claim(self.id, owner)
        if not claim.started:
            log.info("episode %s not started: %s", self.id, claim.reason)
            return
        job = JobRun(self.store, self.id, owner, claim.payload, claim.attempt)
        with heartbeats(job, self.store.policy.heartbeat_s):
            self._run(job)

    def _run(self, job: JobRun) -> None:
        self.owner = job.owner
        try:
            with self.db.session() as s:
                row = s.get(EpisodeRow, self.id)
                request = EpisodeCreate.model_validate(row.request)
                state = self.journal.load(s)
            harness = self._harness(request)
            self._emit("attempt", {"attempt": job.attempt})  # the report marks each start
            for k, v in request.budgets.model_dump(exclude_none=True).items():
                setattr(harness.budgets, k, v)
            if harness.kind == "installed":  # the real CLI drives the days (its own module)
                from services.orchestrator.installed.episode import InstalledEpisode

                InstalledEpisode(self, request, harness).run(state)
                return
            if state is None:
                state = self._setup(request, harness)
            else:  # resuming: the context is the trajectory's, replayed
                state.messages = context_from_items(self.db, self.id)
                state.scenario = scenario_from_items(self.db, self.id)
            self._segment = state.segment
            rt = self._runtime(request, harness, state)
            self._check_fits(rt, state)
            evidence = self.svc.settings.orchestrator.check_evidence
            loop = Loop(rt, state, self._emit, check_evidence=evidence)
            self.max_steps = harness.budgets.max_steps
            self._persist(state)  # the runtime's one-time items; a cancel stops here
            while not loop.done:
                loop.tick()
                self._persist(state)
            self.score_and_finish(state, rt.world)
        except JobCancelled:
            log.info("episode %s stopped: cancelled or taken over", self.id)
        except ContextTooSmall as exc:
            log.warning("episode %s: %s", self.id, exc)
            self.store.fail(self.id, self.owner, "context_too_small", str(exc))
        except Exception as exc:  # noqa: BLE001 - an episode that cannot go on is marked failed
            log.exception("episode %s failed", self.id)
            self.store.fail(self.id, self.owner, type(exc).__name__, str(exc)[:2000])
        finally:
            if self._mcp is not None:
                self._mcp.close()
            self.release()

    def _harness(self, request: EpisodeCreate) -> HarnessConfig:
        """The harness stored with the episode (at submit, or at its first start), so every
        resume runs the configuration it started with."""
        with self.db.session() as s:
            body = s.scalars(
                select(TrajectoryItemRow.body).where(
                    TrajectoryItemRow.episode_id == self.id, TrajectoryItemRow.kind == "harness"
                )
            ).first()
        if body is not None:
            return HarnessConfig.model_validate(body["harness"])
        harness = load_harness(request.harness, self.svc.settings.data_dir)
        self._emit("harness", {"harness": harness.model_dump(mode="json")})
        return harness

    def _emit(self, kind: str, body: dict[str, Any]) -> None:
        """An item, stamped with the time it happened and the segment it belongs to (a
        compaction item opens the segment it names)."""
        segment = body.get("segment_to", self._segment)
        self._segment = segment
        self.items.append((kind, body, now_utc(), segment))

    def _persist(self, state: EpisodeState) -> None:
        """One transaction per tick: the new trajectory items, the tick's journal record (what
        changed in the counters, cursor, pending calls; the context itself is rebuilt from the
        items on resume), the progress and the heartbeat. Raises :class:`JobCancelled` (nothing written) once the episode is no
        longer this run's: cancelled, or taken over after a lost heartbeat."""
        now = now_utc()
        with self.db.session() as s:
            row = s.get(EpisodeRow, self.id)
            if row.status != "running" or row.owner != self.owner:
                raise JobCancelled(self.id)
            if self.seq is None:
                last = s.scalars(
                    select(TrajectoryItemRow.seq)
                    .where(TrajectoryItemRow.episode_id == self.id)
                    .order_by(TrajectoryItemRow.seq.desc())
                    .limit(1)
                ).first()
                self.seq = last or 0
            seq = self.seq + 1
            for kind, body, at, segment in self.items:
                s.add(
                    TrajectoryItemRow(
                        episode_id=self.id, seq=seq, segment=segment,
                        kind=kind, at=at, body=json.loads(json.dumps(body, default=str)),
                    )
                )  # fmt: skip
                seq += 1
            self.seq = seq - 1
            self.items.clear()
            self.journal.write(s, row, state, self.seq, now)
            row.heartbeat_at = row.updated_at = now
            row.progress = min(1.0, state.step / max(1, self.max_steps))
            row.progress_message = f"step {state.step}, day {state.day}"
        self.journal.committed()

    # -- setup ---------------------------------------------------------------------------------

    def _setup(self, request: EpisodeCreate, harness: HarnessConfig) -> EpisodeState:
        """Lease a world and a sandbox, write the system prompt and the task."""
        task = request.task
        world: dict[str, Any] | None = None
        scenario: dict[str, Any] | None = None
        if task.scenario:
            scenario = self.svc.tools.scenario(task.scenario, task.seed).model_dump(mode="json")
            created = self.svc.tools.create_world(task.scenario, task.seed)
            world = {"id": created.id, "token": created.token}
            with self.db.session() as s:
                s.get(EpisodeRow, self.id).world_id = created.id
        sandbox_id = None
        if task.sandbox_template:
            box = self.svc.sandbox.create(
                task.sandbox_template, metadata={"k3stack_episode": self.id}
            )
            sandbox_id = box.sandboxID
            with self.db.session() as s:
                s.get(EpisodeRow, self.id).sandbox_id = sandbox_id
        now = (self.svc.tools.clock(world["id"]).now if world else now_utc()).isoformat()
        skills = harness_skills(harness, self.svc.settings.data_dir)
        environment = {"cwd": "/root", "shell": "sh"} if sandbox_id else {}
        if scenario:
            environment["user"] = f"{scenario['user']['name']} <{scenario['user']['email']}>"
        system = render_system_prompt(
            harness.system_prompt,
            environment=environment,
            memory=memory_context(harness, request.memory),
            skills=[{"name": k, "description": v["description"]} for k, v in skills.items()],
            now=now,
            reasoning_effort=harness.reasoning_effort,
        )
        instruction = task.instruction or ""
        if scenario:
            user = scenario["user"]
            instruction = (
                f"You are the assistant of {user['name']} ({user.get('role') or 'user'}, "
                f"{user['email']}). {scenario['description']}\n"
                f"It is {now} on the world clock. Handle what arrives in the mailbox, chat, "
                "documents and calendar; say when you are done for now and time will move on."
                + (f"\n\n{task.instruction}" if task.instruction else "")
            )
        state = initial_state(system, instruction)
        state.world = WorldLease(**world) if world else None
        state.scenario = scenario
        state.sandbox_id = sandbox_id
        state.clock = now
        state.scratch["memory_files"] = dict(request.memory)
        if scenario:
            self._emit("scenario", {"scenario": scenario})
        self._emit("system", {"message": state.messages[0]})
        self._emit("user", {"message": state.messages[1]})
        self._persist(state)
        return state

    def _runtime(
        self, request: EpisodeCreate, harness: HarnessConfig, state: EpisodeState
    ) -> Runtime:
        tools = toolset_of(harness.tools)
        world = None
        names: dict[str, str] = {}
        scenario = state.scenario
        if state.world is not None:
            w = state.world
            mcp = self._mcp = WorldMCP(self.svc.tools, w.id, w.token)
            found = world_tools(
                mcp, scenario_apps(scenario or {}), harness.mcp_tool_name,
                harness.mcp_name_underscores,
            )  # fmt: skip
            for t in found:
                tools.add(t)
            names = mcp_name_map(found)
            world = World(
                self.svc.tools, w.id, w.token,
                end=datetime.fromisoformat(scenario["end"]),
                start=datetime.fromisoformat(scenario["start"]),
            )  # fmt: skip
        if not state.tools_recorded:
            self._emit("tools", {"tools": tools.specs()})
            state.tools_recorded = True
        policy = self.policy_override or self._policy(request, world)
        policy.sections = list(harness.context.summary_sections)
        window = request.context_window or self._model_window(request) or harness.context.window
        counter = self._counter(request)
        if request.context_headroom is not None:
            # the window held just above the fixed part, so that a short episode compacts
            # whatever the prompt's and the tool schemas' size
            fixed = counter.count(state.messages[:2], tools.specs())
            trigger = harness.context.trigger
            window = min(window, trigger.window_for(fixed + request.context_headroom))
        compactor = Compactor(harness.context, window, counter, policy.summarize, tools.specs())
        ctx = ToolContext(
            sandbox=self.svc.sandbox if state.sandbox_id else None,
            sandbox_id=state.sandbox_id,
            scratch=state.scratch,
            skills=harness_skills(harness, self.svc.settings.data_dir),
            timeout_s=harness.budgets.tool_timeout_s,
        )
        rt = Runtime(
            harness=harness, tools=tools, ctx=ctx, policy=policy, compactor=compactor,
            journal=SQLJournal(self.db, self.id), world=world, names=names, episode_id=self.id,
        )  # fmt: skip
        ctx.subagent = lambda kind, prompt: run_subagent(rt, kind, prompt)
        return rt

    def _check_fits(self, rt: Runtime, state: EpisodeState) -> None:
        """Fail at once, naming the sizes, when the system prompt, the first message and the
        tool schemas already fill the model's window: no compaction can shrink that part, and
        every model call would be refused, so the loop would only end in ``policy_error``."""
        fixed = rt.compactor.count(state.messages[:2])
        window = rt.compactor.window
        if fixed >= window:
            raise ContextTooSmall(
                f"the system prompt, the task and {len(rt.tools.names())} tool schemas take "
                f"{fixed} tokens ({rt.compactor.counter.name}), the model's context is {window}: "
                "serve the model with a longer max_model_len (K3STACK_MODEL__MAX_MODEL_LEN) "
                "or give the episode a larger context_window"
            )

    def _policy(self, request: EpisodeCreate, world: World | None) -> Policy:
        spec = request.policy
        if spec.kind == "oracle":
            assert world is not None
            from shared.contracts.tools import OraclePlan

            plan = OraclePlan.model_validate(
                self.svc.tools.get_json(
                    f"/scenarios/{request.task.scenario}/oracle",
                    params={"seed": request.task.seed},
                )
            )
            return OraclePolicy(plan.model_dump(mode="json"), world.now)
        base_url = spec.base_url or self.svc.model.openai_base_url
        api_key = spec.api_key or self.svc.settings.model.api_key
        return OpenAIPolicy(
            base_url, api_key, spec.model, timeout_s=spec.timeout_s, temperature=spec.temperature,
            seed=spec.seed, tool_choice=spec.tool_choice, reasoning_effort=spec.reasoning_effort,
            summary_max_tokens=min(1024, request.budgets.max_output_tokens or 1024),
        )  # fmt: skip

    def _model_window(self, request: EpisodeCreate) -> int | None:
        """The model service's context length, when the policy is the model service."""
        if request.policy.kind != "openai" or request.policy.base_url is not None:
            return None
        try:
            cards = self.svc.model.get_json("/v1/models")["data"]
        except Exception:  # noqa: BLE001 - unknown: the harness's own window
            return None
        wanted = [c for c in cards if c["id"] == request.policy.model] or cards
        return wanted[0].get("max_model_len") if wanted else None

    def _counter(self, request: EpisodeCreate) -> Any:
        """The model service's tokenizer when the policy is the model service (or the oracle,
        which has no tokenizer of its own) and it answers; else the named approximation."""
        if request.policy.kind == "openai" and request.policy.base_url is not None:
            return ApproxTokenCounter()
        try:
            self.svc.model.post_json("/v1/tokenize", {"prompt": "probe"})
            return ModelTokenCounter(self.svc.model)
        except Exception:  # noqa: BLE001 - cannot count there: the approximation, named
            return ApproxTokenCounter()

    # -- finish --------------------------------------------------------------------------------

    def score_and_finish(self, state: EpisodeState, world: World | None) -> None:
        """Score the world (when the run's outcome is scored), then end the job in the status
        its outcome maps to (:mod:`~services.orchestrator.episode.stop`), the outcome named."""
        reason = Outcome.of(state.exit_reason)
        result: dict[str, Any] = {
            "exit_reason": reason.value,
            "exit_detail": state.exit_detail,
        }
        reward = None
        if world is not None and reason.scored:
            checks = self.svc.tools.checks(world.id).model_dump(mode="json")
            world_state = self.svc.tools.state(world.id, tables=False).model_dump(mode="json")
            total = checks["events_total"] or 0
            reward = checks["events_passed"] / total if total else 0.0
            result.update(
                events_total=total,
                events_passed=checks["events_passed"],
                checks_total=checks["checks_total"],
                checks_passed=checks["checks_passed"],
                events=[
                    {k: e.get(k) for k in ("event_id", "title", "status", "passed", "checks")}
                    for e in checks["events"]
                ],
                judge_checks=len(checks.get("judge_checks", [])),
                state_hash=world_state.get("state_hash"),
                full_hash=world_state.get("full_hash"),
            )
        self._emit("score", {"reward": reward, **result})
        state.phase = "done"
        self._persist(state)
        with self.db.session() as s:
            s.execute(
                update(EpisodeRow)
                .where(EpisodeRow.id == self.id, EpisodeRow.owner == self.owner)
                .values(reward=reward, updated_at=now_utc())
            )
        if reason.failed:  # scored, but a failed job: it says why
            detail = state.exit_detail or reason.value
            if not self.store.fail(self.id, self.owner, reason.value, str(detail)[:2000]):
                raise JobCancelled(self.id)
            with self.db.session() as s:
                s.execute(update(EpisodeRow).where(EpisodeRow.id == self.id).values(result=result))
        elif not self.store.succeed(self.id, self.owner, result, None):
            raise JobCancelled(self.id)
        try:
            from services.orchestrator.episode.export import write_artifacts

            location = write_artifacts(self.db, self.svc, self.id)
        except Exception:  # noqa: BLE001 - the episode is scored even if the artefacts fail
            log.exception("episode %s: writing trajectory/report failed", self.id)
            return
        with self.db.session() as s:
            s.get(EpisodeRow, self.id).result_location = location

    def release(self) -> None:
        release_resources(self.db, self.svc, self.id)


def release_resources(db: Any, svc: Services, episode_id: str) -> None:
    """Kill a finished episode's sandbox and delete its world (unless kept). Idempotent."""
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        if row is None or row.status not in TERMINAL or row.resources_released:
            return
        keep_world = bool((row.request or {}).get("keep_world"))
        sandbox_id, world_id = row.sandbox_id, row.world_id
    from shared.clients import ServiceError

    try:
        if sandbox_id:
            svc.sandbox.kill(sandbox_id)
    except ServiceError as exc:
        if exc.status != 404:
            log.warning("episode %s: sandbox %s not released: %s", episode_id, sandbox_id, exc)
            return
    try:
        if world_id and not keep_world:
            svc.tools.delete_world(world_id)
    except ServiceError as exc:
        if exc.status != 404:
            log.warning("episode %s: world %s not released: %s", episode_id, world_id, exc)
            return
    with db.session() as s:
        s.execute(
            update(EpisodeRow).where(EpisodeRow.id == episode_id).values(resources_released=True)
        )


def run_subagent(rt: Runtime, kind: str, prompt: str) -> str:
    """A child agent with its own configuration; its calls run directly (not journalled)."""
    from services.orchestrator.episode.loop import MemoryJournal

    sub = rt.harness.subagents.get(kind) or next(iter(rt.harness.subagents.values()), None)
    if sub is None:
        return f"Error: no subagent {kind!r} in this harness"
    child_tools = ToolSet()
    delegators = {"Agent", "spawn_agent", "sessions_spawn", "delegate_task"}
    for name, tool in rt.tools.tools.items():
        if name in delegators or (sub.tools is not None and name not in sub.tools):
            continue
        child_tools.add(tool)
    harness = rt.harness.model_copy(deep=True)
    harness.budgets.max_steps = sub.max_steps
    harness.budgets.steps_per_day = sub.max_steps
    child = Runtime(
        harness=harness, tools=child_tools, ctx=rt.ctx, policy=rt.policy,
        compactor=rt.compactor, journal=MemoryJournal(), world=None, names=rt.names,
        episode_id=f"{rt.episode_id}/sub",
    )  # fmt: skip
    state = initial_state(sub.system_prompt, prompt)
    loop = Loop(child, state, lambda kind, body: None)
    while not loop.done:
        loop.tick()
    finals = [m for m in state.messages if m["role"] == "assistant" and m.get("content")]
    return finals[-1]["content"] if finals else "(the subagent gave no answer)"
