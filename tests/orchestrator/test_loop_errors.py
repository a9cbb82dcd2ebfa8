"""Malformed tool calls, unknown tools, bad arguments, tool timeouts and sandbox errors become
error observations and the episode goes on; a random-weights model's noise does too."""

from __future__ import annotations

import json
import threading

import pytest

from services.orchestrator.context.compaction import Compactor
from services.orchestrator.context.tokens import ApproxTokenCounter
from services.orchestrator.episode.loop import Loop, MemoryJournal, Runtime
from services.orchestrator.episode.policy import ScriptedPolicy, Turn
from services.orchestrator.episode.state import initial_state
from services.orchestrator.harness.config import load_harness
from services.orchestrator.tools.base import Tool, ToolSet
from services.orchestrator.tools.builtin import CATALOGUE, ToolContext
from shared.clients import SandboxClient

BLOCK = threading.Event()


def call(name: str, arguments: str, n: int) -> dict:
    return {"id": f"c{n}", "name": name, "arguments": arguments}


TURNS = [
    [call("Bash", '{"command": "echo hi"', 1)],  # malformed JSON
    [call("NoSuchTool", "{}", 2)],  # unknown tool
    [call("Edit", json.dumps({"file_path": 3}), 3)],  # bad arguments
    [call("slow", "{}", 4)],  # times out
    [call("Bash", json.dumps({"command": "echo hi"}), 5)],  # sandbox unreachable
    [call("Read", "[1, 2]", 6)],  # arguments not an object
]


def script(view) -> Turn:
    if view.step < len(TURNS):
        return Turn(tool_calls=TURNS[view.step])
    return Turn(content="All done.")


def test_bad_calls_become_observations_and_the_episode_goes_on() -> None:
    harness = load_harness("claude-code")
    harness.budgets.tool_timeout_s = 0.2
    tools = ToolSet()
    for key in harness.tools:
        tools.add(CATALOGUE[key])
    tools.add(Tool("slow", "Never returns.", {"type": "object", "properties": {}},
                   run=lambda ctx, a: BLOCK.wait()))  # fmt: skip
    sandbox = SandboxClient("http://127.0.0.1:9", timeout=2.0, retries=0)
    policy = ScriptedPolicy(script)
    rt = Runtime(
        harness=harness, tools=tools,
        ctx=ToolContext(sandbox=sandbox, sandbox_id="sbx_gone", timeout_s=0.2 + 5),
        policy=policy,
        compactor=Compactor(harness.context, 200_000, ApproxTokenCounter(), policy.summarize),
        journal=MemoryJournal(), episode_id="errors",
    )  # fmt: skip
    state = initial_state("sys", "go")
    items: list[tuple[str, dict]] = []
    loop = Loop(rt, state, lambda kind, body: items.append((kind, body)))
    try:
        while not loop.done:
            loop.tick()
    finally:
        BLOCK.set()
    obs = [b for k, b in items if k == "tool"]
    assert [o["call_id"] for o in obs] == [f"c{i}" for i in range(1, 7)]
    assert all(o["is_error"] for o in obs)
    text = [o["observation"] for o in obs]
    assert "not valid JSON" in text[0]
    assert "unknown tool 'NoSuchTool'" in text[1] and "Bash" in text[1]
    assert "invalid arguments for Edit" in text[2] and "file_path" in text[2]
    assert "timed out" in text[3]
    assert "sandbox error" in text[4]
    assert "JSON object" in text[5]
    assert state.exit_reason == "completed"
    assert state.messages[-1] == {"role": "assistant", "content": "All done."}
    # every call's result sits right after it in the context
    tool_msgs = [m for m in state.messages if m["role"] == "tool"]
    assert len(tool_msgs) == 6


@pytest.mark.slow
def test_random_weights_model_episode_runs_to_its_budget(orch_db, services, model_url) -> None:
    """The tiny K3 model with random weights through the official openai client: its output is
    noise, each tool call (if any) an observation; the loop, counting and scoring run."""
    from services.orchestrator.episode.models import EpisodeRow
    from services.orchestrator.episode.runner import EpisodeRunner
    from services.orchestrator.episode.schema import EpisodeCreate
    from services.orchestrator.episode.service import create_episode
    from shared.clients import ModelClient

    services.model = ModelClient(model_url, timeout=60.0)
    body = EpisodeCreate.model_validate(
        {"task": {"scenario": "finance_expenses"}, "harness": "kimi-code",
         "policy": {"kind": "openai", "seed": 7, "temperature": 1.0, "timeout_s": 120},
         "budgets": {"max_steps": 3, "max_output_tokens": 24}}
    )  # fmt: skip
    episode_id = create_episode(orch_db, body, lambda _id: None)
    EpisodeRunner(orch_db, services, episode_id).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        assert row.status == "succeeded", row.error_message
        assert row.state["step"] >= 1
        assert row.state["usage"]["completion_tokens"] > 0
        assert row.result["events_total"] > 0 and row.reward is not None


@pytest.mark.slow
@pytest.mark.timeout(900)  # ten tiny-model turns on a loaded CPU; every client waits less
def test_the_demos_model_episode_runs_to_its_step_budget(orch_db, services, model_url) -> None:
    """`make demo`'s second episode, as the demo builds it (hr_onboarding, claude-code, the
    tiny K3 model of the model service at its default settings): its 55 tool schemas alone are
    ~12K tokens of the tiny tokenizer, so the model's window must hold them; the episode takes
    its steps, compacts (the demo holds the window just above the fixed context, whatever the
    preset's prompt size) and ends on its step budget or the scenario's end, not in
    ``policy_error``."""
    from services.orchestrator.episode.models import EpisodeRow, TrajectoryItemRow
    from services.orchestrator.episode.runner import EpisodeRunner
    from services.orchestrator.episode.service import create_episode, episode_view
    from shared.clients import ModelClient
    from shared.contracts.orchestrator import EpisodeCreate
    from shared.demo import model_episode_body

    services.model = ModelClient(model_url, timeout=60.0)
    body = EpisodeCreate.model_validate(model_episode_body({}))
    body.policy.timeout_s = 240.0  # one model request; the test's own timeout is 900 s
    episode_id = create_episode(orch_db, body, lambda _id: None)
    EpisodeRunner(orch_db, services, episode_id).run()
    with orch_db.session() as s:
        ep = episode_view(s.get(EpisodeRow, episode_id))
        items = s.query(TrajectoryItemRow).filter_by(episode_id=episode_id).all()
        errors = [i.body for i in items if i.kind == "error"]
        failed_calls = [i.body for i in items if i.kind == "tool" and i.body["is_error"]]
    assert ep.status == "succeeded", ep.error_message
    # Its step budget, or the scenario's last simulated day, whichever comes first.
    assert ep.exit_reason in ("max_steps", "scenario_end"), (ep.exit_detail, errors)
    assert 1 <= ep.step <= body.budgets.max_steps
    print(f"{ep.step} steps, {ep.compactions} compactions, exit {ep.exit_reason}")
    assert ep.tokens > 0 and ep.events_total and ep.reward is not None
    assert not [e for e in errors if e["where"] == "policy"]
    # The demo holds the window small so that compaction runs for real within its steps,
    # and the model's noise calls come back as error observations.
    assert body.context_headroom and ep.compactions >= 1
    assert len(failed_calls) >= 1, [i.kind for i in items]


def test_a_context_too_small_for_the_prompt_fails_at_once_naming_the_sizes(
    orch_db, services
) -> None:
    """A window that the system prompt and tool schemas alone overflow can never be sent:
    the episode fails before its first model call, saying so, and its world is released."""
    from services.orchestrator.episode.models import EpisodeRow
    from services.orchestrator.episode.runner import EpisodeRunner
    from services.orchestrator.episode.service import create_episode, episode_view
    from shared.clients import ServiceError
    from shared.contracts.orchestrator import EpisodeCreate

    body = EpisodeCreate.model_validate(
        {"task": {"scenario": "finance_expenses"}, "harness": "claude-code",
         "policy": {"kind": "oracle"}, "context_window": 1000}
    )  # fmt: skip
    episode_id = create_episode(orch_db, body, lambda _id: None)
    EpisodeRunner(orch_db, services, episode_id).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        ep = episode_view(row)
        world_id, released = row.world_id, row.resources_released
    assert ep.status == "failed" and ep.error_code == "context_too_small"
    assert "tool schemas take" in ep.error_message and "context is 1000" in ep.error_message
    assert ep.step == 0
    assert released
    with pytest.raises(ServiceError) as gone:
        services.tools.clock(world_id)
    assert gone.value.status == 404


def test_a_policy_that_keeps_failing_says_why(orch_db, services) -> None:
    """After the policy's repeated failures the episode ends in ``policy_error`` and
    ``GET /episodes/{id}`` carries the last failure's message."""
    from services.orchestrator.episode.models import EpisodeRow
    from services.orchestrator.episode.runner import EpisodeRunner
    from services.orchestrator.episode.service import create_episode, episode_view
    from shared.contracts.orchestrator import EpisodeCreate

    def refuse(view) -> Turn:
        raise RuntimeError("endpoint says no (HTTP 400)")

    body = EpisodeCreate.model_validate(
        {"task": {"scenario": "finance_expenses"}, "harness": "kimi-code",
         "policy": {"kind": "oracle"}}
    )  # fmt: skip
    episode_id = create_episode(orch_db, body, lambda _id: None)
    EpisodeRunner(orch_db, services, episode_id, policy=ScriptedPolicy(refuse)).run()
    with orch_db.session() as s:
        ep = episode_view(s.get(EpisodeRow, episode_id))
    assert ep.exit_reason == "policy_error" and ep.step == 0
    # a policy that never answered is a failed episode (still scored), never "succeeded"
    assert ep.status == "failed" and ep.error_code == "policy_error"
    assert ep.events_total and ep.reward is not None
    assert ep.exit_detail == "RuntimeError: endpoint says no (HTTP 400)"
