"""The white-box loop's driver: the platform's own agent loop (:mod:`~.loop`) over a leased world
and sandbox, one persisted tick at a time.

Its first start writes the system prompt and the task (and leases the world and sandbox); a
resumed run rebuilds the context from the trajectory's items and the rest of the state from the
journal, so a worker that died mid-episode is continued from its last committed tick.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import select

from services.orchestrator.context.compaction import Compactor
from services.orchestrator.context.tokens import ApproxTokenCounter, ModelTokenCounter, TokenCounter
from services.orchestrator.episode.driver import DriverContext, NotPausable, Step
from services.orchestrator.episode.loop import Loop, Runtime, World
from services.orchestrator.episode.models import TrajectoryItemRow
from services.orchestrator.episode.policy import OpenAIPolicy, OraclePolicy
from services.orchestrator.episode.protocols import Policy
from services.orchestrator.episode.recorder import EpisodeRecorder, SQLJournal
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.state import EpisodeState, WorldLease, initial_state
from services.orchestrator.episode.store import now_utc
from services.orchestrator.harness.memory import harness_skills, memory_context
from services.orchestrator.harness.prompt import render_system_prompt
from services.orchestrator.tools.base import ToolSet
from services.orchestrator.tools.builtin import ToolContext, toolset_of
from services.orchestrator.tools.mcp import WorldMCP, mcp_name_map, scenario_apps, world_tools
from shared.db import ServiceDatabase


class ContextTooSmall(Exception):
    """The fixed part of the context alone does not fit the model's window."""


def scenario_from_items(db: ServiceDatabase, episode_id: str) -> dict[str, Any] | None:
    """The scenario instance the episode was set up with (its ``scenario`` item)."""
    with db.session() as s:
        body = s.scalars(
            select(TrajectoryItemRow.body).where(
                TrajectoryItemRow.episode_id == episode_id, TrajectoryItemRow.kind == "scenario"
            )
        ).first()
    return (body or {}).get("scenario")


def context_from_items(db: ServiceDatabase, episode_id: str) -> list[dict[str, Any]]:
    """The context the next model call sends, replayed from the trajectory's items."""
    from services.orchestrator.episode.export import to_shared, trajectory

    doc = trajectory(db, episode_id)
    return [m.model_dump(mode="json", exclude_none=True) for m in to_shared(doc).context()]


class LoopDriver:
    """Drives an episode of a white-box harness through :class:`~.loop.Loop`."""

    name: ClassVar[str] = "loop"

    def __init__(self, ctx: DriverContext) -> None:
        self.ctx = ctx
        self.db = ctx.db
        self.svc = ctx.services
        self.id = ctx.job.id
        self.rec = EpisodeRecorder(ctx.db, ctx.services, ctx.job)
        self.request = self.rec.request()
        self.harness = self.rec.harness(self.request)
        self._mcp: WorldMCP | None = None  # the run's MCP sessions with the world
        self._loop: Loop | None = None
        self._world: World | None = None

    # -- the protocol ------------------------------------------------------------------------

    def start(self) -> EpisodeState:
        state = self.rec.load_state()
        if state is None:
            state = self._setup()
        else:  # resuming: the context is the trajectory's, replayed
            state.messages = context_from_items(self.db, self.id)
            state.scenario = scenario_from_items(self.db, self.id)
        rt = self._runtime(state)
        self._check_fits(rt, state)
        self._loop = Loop(rt, state, self.rec.emit, check_evidence=True)  # the report's
        self._world = rt.world
        self.rec.max_steps = self.harness.budgets.max_steps
        self.rec.persist(state)  # the runtime's one-time items; a cancel stops here
        return state

    def tick(self, state: EpisodeState) -> Step:
        loop = self._loop
        assert loop is not None, "tick before start"
        if not loop.done:
            loop.tick()
            self.rec.persist(state)
        return Step.done if loop.done else Step.go_on

    def pause(self, state: EpisodeState) -> None:
        raise NotPausable("a white-box episode resumes from its last committed tick, unpaused")

    def finish(self, state: EpisodeState) -> None:
        self.rec.score_and_finish(state, self._world)

    def close(self) -> None:
        if self._mcp is not None:
            self._mcp.close()

    # -- setup -------------------------------------------------------------------------------

    def _setup(self) -> EpisodeState:
        """Lease a world and a sandbox, write the system prompt and the task."""
        request, harness = self.request, self.harness
        task = request.task
        world: dict[str, Any] | None = None
        scenario: dict[str, Any] | None = None
        if task.scenario:
            scenario = self.svc.tools.scenario(task.scenario, task.seed).model_dump(mode="json")
            created = self.svc.tools.create_world(task.scenario, task.seed)
            world = {"id": created.id, "token": created.token}
            self.rec.lease(world_id=created.id)
        sandbox_id = None
        if task.sandbox_template:
            box = self.svc.sandbox.create(
                task.sandbox_template, metadata={"k3stack_episode": self.id}
            )
            sandbox_id = box.sandboxID
            self.rec.lease(sandbox_id=sandbox_id)
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
            self.rec.emit("scenario", {"scenario": scenario})
        self.rec.emit("system", {"message": state.messages[0]})
        self.rec.emit("user", {"message": state.messages[1]})
        self.rec.persist(state)
        return state

    def _runtime(self, state: EpisodeState) -> Runtime:
        request, harness = self.request, self.harness
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
            self.rec.emit("tools", {"tools": tools.specs()})
            state.tools_recorded = True
        policy = self.ctx.policy or self._policy(request, world)
        policy.sections = list(harness.context.summary_sections)
        window = request.context_window or self._model_window(request) or harness.context.window
        counter = self.token_counter(request)
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

    def token_counter(self, request: EpisodeCreate) -> TokenCounter:
        """The model service's tokenizer when the policy is the model service (or the oracle,
        which has no tokenizer of its own) and it answers; else the named approximation."""
        if request.policy.kind == "openai" and request.policy.base_url is not None:
            return ApproxTokenCounter()
        try:
            self.svc.model.post_json("/v1/tokenize", {"prompt": "probe"})
            return ModelTokenCounter(self.svc.model)
        except Exception:  # noqa: BLE001 - cannot count there: the approximation, named
            return ApproxTokenCounter()


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
