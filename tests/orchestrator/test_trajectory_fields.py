"""What ``GET /episodes/{id}/trajectory`` says about each step is what happened then: the
time a step happened (not the time of the GET), each model call's latency, each tool call's
duration, the segment of each observation, the model's reasoning, and the summary call's
tokens (counted in the episode's usage and its budgets too)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.orchestrator.context.compaction import Summary
from services.orchestrator.episode.export import to_shared, trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.policy import ScriptedPolicy, Turn, View
from services.orchestrator.episode.runner import EpisodeRunner, Services
from services.orchestrator.episode.service import create_episode
from shared.contracts.orchestrator import EpisodeCreate
from shared.trajectory import CompactionStep, ModelStep

BIG = "lorem ipsum dolor sit amet " * 200  # ~1,350 approximate tokens a turn


def local_services(tmp_path: Path) -> Services:
    from shared.clients import ModelClient
    from shared.objectstore import LocalObjectStore
    from shared.settings import get_settings

    model = ModelClient("http://127.0.0.1:9", timeout=2.0, retries=0)  # nothing listens
    return Services(tools=None, sandbox=None, model=model, settings=get_settings(),
                    objects=LocalObjectStore(tmp_path / "objects"))  # fmt: skip


def script(view: View) -> Turn:
    time.sleep(0.02)
    if view.step < 4:
        call = {"id": f"t{view.step}", "name": "TodoWrite",
                "arguments": '{"todos": [{"content": "a", "status": "pending", '
                             '"activeForm": "doing a"}]}'}  # fmt: skip
        return Turn(content=BIG, tool_calls=[call], reasoning=f"thinking {view.step}",
                    usage={"prompt_tokens": 10, "completion_tokens": 5})  # fmt: skip
    return Turn(content="done", usage={"prompt_tokens": 10, "completion_tokens": 5})


def summarize(messages: list[dict[str, Any]], prompt: str) -> Summary:
    return Summary("short summary", {"prompt_tokens": 1000, "completion_tokens": 100}, "m", 3.0)


def test_steps_carry_their_own_times_latency_duration_segment_reasoning(
    orch_db: Any, tmp_path: Path
) -> None:
    body = EpisodeCreate.model_validate(
        {"task": {"instruction": "plan"}, "harness": "claude-code", "context_window": 4000}
    )
    episode_id = create_episode(orch_db, body, lambda _id: None)
    policy = ScriptedPolicy(script, summarizer=summarize)
    EpisodeRunner(orch_db, local_services(tmp_path), episode_id, policy=policy).run()
    time.sleep(0.05)
    asked_at = datetime.now(UTC)
    traj = to_shared(trajectory(orch_db, episode_id))
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        assert row.status == "succeeded", row.error_message
        usage = row.state["usage"]

    model_steps = [s for s in traj.steps if isinstance(s, ModelStep)]
    compactions = [s for s in traj.steps if isinstance(s, CompactionStep)]
    assert len(model_steps) == 5 and compactions
    stamps = [s.timestamp for s in traj.steps]
    assert all(t < asked_at for t in stamps) and stamps == sorted(stamps)
    assert len(set(stamps)) > len(stamps) // 2  # not one time for every item of a tick
    assert all(s.generation.latency_ms and s.generation.latency_ms >= 20 for s in model_steps)
    obs = [o for s in model_steps for o in s.observations]
    assert len(obs) == 4 and all(o.duration_ms is not None for o in obs)
    assert model_steps[0].message.reasoning_content == "thinking 0"
    # every observation names its segment; those after the first compaction are in segment >= 1
    assert obs[0].metadata["segment"] == 0 and obs[-1].metadata["segment"] >= 1
    # the summary call's tokens: on the compaction step and in the episode's usage
    gen = compactions[0].generation
    assert gen is not None and gen.usage.prompt_tokens == 1000
    model_prompt = sum(s.generation.usage.prompt_tokens for s in model_steps)
    assert usage["prompt_tokens"] == model_prompt + 1000 * len(compactions)
