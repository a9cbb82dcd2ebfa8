"""A worker killed between moving the world clock and persisting the tick: the resumed run
moves the clock to the same time, not on to the next event (it never moves twice)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.orchestrator.context.compaction import Compactor
from services.orchestrator.context.tokens import ApproxTokenCounter
from services.orchestrator.episode.loop import Loop, MemoryJournal, Runtime, World
from services.orchestrator.episode.policy import ScriptedPolicy, Turn
from services.orchestrator.episode.state import initial_state
from services.orchestrator.harness.config import load_harness
from services.orchestrator.tools.base import ToolSet
from services.orchestrator.tools.builtin import ToolContext


class Killed(BaseException):
    """The worker dying right after the tools service moved the clock."""


def runtime(services: Any, world: World) -> Runtime:
    harness = load_harness("claude-code")
    policy = ScriptedPolicy(lambda view: Turn(content="Done for now."))
    return Runtime(
        harness=harness, tools=ToolSet(), ctx=ToolContext(), policy=policy,
        compactor=Compactor(harness.context, 200_000, ApproxTokenCounter(), policy.summarize),
        journal=MemoryJournal(), world=world, episode_id="clock",
    )  # fmt: skip


def test_a_resumed_episode_moves_the_clock_once(services: Any) -> None:
    tools = services.tools
    inst = tools.scenario("finance_expenses", 1)
    created = tools.create_world("finance_expenses", 1)
    try:
        world = World(tools, created.id, created.token,
                      end=datetime.fromisoformat(inst.end.isoformat()),
                      start=datetime.fromisoformat(inst.start.isoformat()))  # fmt: skip
        state = initial_state("sys", "go")
        loop = Loop(runtime(services, world), state, lambda kind, body: None)
        real_advance = tools.advance
        moved: list[str] = []

        def advance_then_die(world_id: str, **kw: Any) -> Any:
            real_advance(world_id, **kw)
            moved.append(kw["to"])
            raise Killed

        persisted = state.model_copy(deep=True)
        tools.advance = advance_then_die  # type: ignore[method-assign]
        try:
            while not moved:
                persisted = state.model_copy(deep=True)  # what the runner committed after each tick
                try:
                    loop.tick()
                except Killed:
                    break
        finally:
            tools.advance = real_advance  # type: ignore[method-assign]
        first = tools.clock(created.id).now
        assert first == datetime.fromisoformat(moved[0])

        resumed = Loop(runtime(services, world), persisted, lambda kind, body: None)
        while persisted.turn_ended:  # the resumed run handles the end of that turn
            resumed.tick()
        assert tools.clock(created.id).now == first  # not moved on to the next event
    finally:
        tools.delete_world(created.id)
