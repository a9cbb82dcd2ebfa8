"""The trajectory schema: JSON round trips, its rules, and both exporters — a recorded episode
replays exactly through the model service's replay engine (over HTTP, with the official
``openai`` client) and exports to ATIF that validates against the schema in the repo."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import jsonschema
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.chat import ChatMessage, FunctionCall, ToolCall, ToolDefinition, Usage
from shared.trajectory import (
    EventResult,
    Generation,
    ModelStep,
    Trajectory,
    TrajectoryFormatError,
)
from shared.trajectory.atif import from_atif, to_atif, validate_atif
from shared.trajectory.replay import chat_request_body, to_replay_lines, write_replay_file

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TOOLS = [
    ToolDefinition.model_validate(
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "Run a command.",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
        }
    ),
    ToolDefinition.model_validate(
        {"type": "function", "function": {"name": "send_email", "parameters": {"type": "object"}}}
    ),
]


def _call(call_id: str, name: str, args: dict) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=json.dumps(args)))


def _usage(prompt: int, completion: int, cached: int = 0) -> Usage:
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details={"cached_tokens": cached},
    )


def episode() -> Trajectory:
    """A small but complete episode: tools, parallel calls, a pause, a compaction, an end."""
    clock = iter(T0 + timedelta(seconds=i) for i in range(100))
    traj = Trajectory(id="ep-1", tools=TOOLS, created_at=T0)
    traj.metadata.harness, traj.metadata.model = "codex", "k3-tiny"
    traj.metadata.task, traj.metadata.seed = "fix-test", 7
    traj.add_message(
        ChatMessage(role="system", content="You are a coding agent."), timestamp=next(clock)
    )
    traj.add_message(
        ChatMessage(role="user", content="Fix the failing test, then mail Ada."),
        timestamp=next(clock),
    )
    traj.add_model_step(
        ChatMessage(
            role="assistant",
            content="Let me look.",
            reasoning_content="Run the tests first.",
            tool_calls=[
                _call("c1", "shell", {"cmd": "pytest -q"}),
                _call("c2", "shell", {"cmd": "ls"}),
            ],
        ),
        Generation(
            model="k3-tiny",
            usage=_usage(120, 6),
            finish_reason="tool_calls",
            prompt_token_ids=list(range(120)),
            completion_token_ids=[5, 6, 7, 8, 9, 10],
            logprobs=[-0.1, -0.2, -0.3, -0.4, -0.5, -0.6],
            loss_mask=[1, 1, 1, 1, 1, 0],
            weight_version="v3",
        ),
        options={"temperature": 0.0, "seed": 7, "max_tokens": 256},
        timestamp=next(clock),
    )
    traj.add_observation("c1", "1 failed, 3 passed", timestamp=next(clock))
    traj.add_observation("c2", "src tests", is_error=False)
    traj.add_pause(
        sandbox_checkpoint_id="cp-3",
        world_snapshot_id="snap-2",
        reason="rollout",
        timestamp=next(clock),
    )
    traj.add_model_step(
        ChatMessage(
            role="assistant",
            content=None,
            tool_calls=[_call("c3", "send_email", {"to": "ada@x.org"})],
        ),
        Generation(model="k3-tiny", usage=_usage(160, 9, cached=120), finish_reason="tool_calls"),
        options={"temperature": 0.0, "seed": 7, "max_tokens": 256},
        timestamp=next(clock),
    )
    traj.add_observation("c3", "error: unknown recipient", is_error=True)
    traj.add_compaction(
        [
            ChatMessage(role="system", content="You are a coding agent."),
            ChatMessage(
                role="user", content="Summary: tests run, mail to Ada failed (unknown recipient)."
            ),
        ],
        summary="tests run, mail to Ada failed",
        tokens_before=200,
        tokens_after=40,
        generation=Generation(usage=_usage(200, 30)),
        timestamp=next(clock),
    )
    traj.add_model_step(
        ChatMessage(role="assistant", content="Done: the test passes; Ada's address is wrong."),
        Generation(model="k3-tiny", usage=_usage(40, 12), finish_reason="stop"),
        options={"temperature": 0.0, "seed": 7, "max_tokens": 256},
        timestamp=next(clock),
    )
    traj.finish("completed", reward=0.5)
    traj.exit.at = next(clock)  # type: ignore[union-attr]
    traj.metadata.event_results = [EventResult(event_id="mail_ada", passed=False, detail="no mail")]
    return Trajectory.model_validate(traj.model_dump())


# --------------------------------------------------------------------------- schema


def test_json_round_trip_is_lossless():
    traj = episode()
    again = Trajectory.from_json(traj.to_json())
    assert again == traj
    assert again.to_json() == traj.to_json()
    assert json.loads(traj.to_json())["format_version"] == "1.0"


def test_requests_rebuild_each_call_context_across_compaction():
    reqs = list(episode().requests())
    assert [r.segment for r in reqs] == [0, 0, 1]
    assert [m.role for m in reqs[0].messages] == ["system", "user"]
    # second call sees the first answer and both tool results, in call order
    assert [m.role for m in reqs[1].messages] == ["system", "user", "assistant", "tool", "tool"]
    assert [m.tool_call_id for m in reqs[1].messages[3:]] == ["c1", "c2"]
    # after the compaction the context is exactly what the compaction step says
    assert [m.text() for m in reqs[2].messages][1].startswith("Summary:")
    assert len(reqs[2].messages) == 2


def test_usage_totals_include_cached_and_compaction_calls():
    usage = episode().usage()
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (520, 57, 120)


def test_pause_points_carry_both_ids():
    [(index, point)] = episode().pause_points()
    assert (point.sandbox_checkpoint_id, point.world_snapshot_id) == ("cp-3", "snap-2")
    assert index == 3


def test_unknown_major_version_is_refused():
    doc = json.loads(episode().to_json())
    doc["format_version"] = "2.0"
    with pytest.raises(TrajectoryFormatError, match="reads 1.x"):
        Trajectory.from_json(json.dumps(doc))
    doc["format_version"] = "1.7"  # a newer minor of the same major reads
    assert Trajectory.from_json(json.dumps(doc)).format_version == "1.7"


def test_rules_that_keep_a_trajectory_consistent():
    with pytest.raises(ValueError, match="align one-to-one"):
        Generation(completion_token_ids=[1, 2, 3], logprobs=[-0.1, -0.2])
    with pytest.raises(ValueError, match="assistant"):
        ModelStep(message=ChatMessage(role="user", content="hi"))
    traj = episode()
    with pytest.raises(ValueError, match="no tool call 'c1' in the current segment"):
        traj.add_observation("c1", "late")  # c1 is before the compaction
    fresh = Trajectory(id="ep-2")
    fresh.add_model_step(ChatMessage(role="assistant", tool_calls=[_call("x", "shell", {})]))
    fresh.add_observation("x", "ok")
    with pytest.raises(ValueError, match="already has its observation"):
        fresh.add_observation("x", "again")
    with pytest.raises(ValueError, match="ids are 1-64"):
        Trajectory(id="has space")
    with pytest.raises(ValueError, match="tool_call_id"):
        ChatMessage(role="tool", content="x")


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


@st.composite
def trajectories(draw: st.DrawFn) -> Trajectory:
    traj = Trajectory(id=draw(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)))
    for i in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["message", "model", "compaction", "pause"]))
        ts = T0 + timedelta(seconds=i)
        if kind == "message":
            parts = st.lists(
                st.builds(lambda t: {"type": "text", "text": t}, _text)
                | st.just(
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
                ),
                min_size=1,
                max_size=3,
            )
            role = draw(st.sampled_from(["system", "developer", "user"]))
            traj.add_message(ChatMessage(role=role, content=draw(_text | parts)), timestamp=ts)
        elif kind == "model":
            n = draw(st.integers(0, 3))
            calls = [_call(f"c{i}-{j}", "shell", {"cmd": draw(_text)}) for j in range(n)]
            toks = draw(st.lists(st.integers(0, 2**20), max_size=5))
            gen = Generation(
                usage=_usage(draw(st.integers(0, 10**6)), len(toks)),
                completion_token_ids=toks,
                logprobs=[draw(st.floats(-50, 0)) for _ in toks],
                loss_mask=[draw(st.sampled_from([0, 1])) for _ in toks],
            )
            traj.add_model_step(
                ChatMessage(
                    role="assistant", content=draw(st.none() | _text), tool_calls=calls or None
                ),
                gen,
                options={"temperature": draw(st.floats(0, 2))},
                timestamp=ts,
            )
            for c in calls:
                traj.add_observation(c.id, draw(_text), is_error=draw(st.booleans()))
        elif kind == "compaction":
            traj.add_compaction(
                [ChatMessage(role="user", content=draw(_text))], summary=draw(_text), timestamp=ts
            )
        else:
            traj.add_pause(
                sandbox_checkpoint_id=draw(st.none() | _text),
                world_snapshot_id=draw(st.none() | _text),
                timestamp=ts,
            )
    return traj


@settings(max_examples=60, deadline=None)
@given(trajectories())
def test_any_trajectory_round_trips_and_exports_valid_atif(traj):
    assert Trajectory.from_json(traj.to_json()) == traj
    doc = to_atif(traj)
    validate_atif(doc)
    assert len(doc["steps"]) == len(traj.steps)
    assert from_atif(json.loads(json.dumps(doc))) == traj  # ATIF and back, exactly
    assert len(to_replay_lines(traj)) == sum(isinstance(s, ModelStep) for s in traj.steps)


# --------------------------------------------------------------------------- replay


def test_recorded_episode_replays_exactly_through_the_replay_engine(tmp_path):
    import openai

    from services.model.app import create_app
    from shared.settings import load_settings

    traj = episode()
    path = tmp_path / "episode.jsonl"
    assert write_replay_file(traj, path) == 3
    settings_ = load_settings(
        data_dir=tmp_path,
        model={"engine": "replay", "replay_file": str(path), "served_model_name": "k3-tiny"},
    )
    with TestClient(create_app(settings_)) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http)
        for req in traj.requests():
            body = chat_request_body(req.messages, req.tools, req.options, model="k3-tiny")
            answer = client.chat.completions.create(**body)
            msg = answer.choices[0].message
            recorded = req.step.message
            assert [
                (c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []
            ] == [(c.id, c.function.name, c.function.arguments) for c in recorded.tool_calls or []]
            assert msg.content == recorded.content
            assert answer.choices[0].finish_reason == req.step.generation.finish_reason
            assert answer.usage.prompt_tokens == req.step.generation.usage.prompt_tokens
            streamed: dict[int, list[str]] = {}
            for chunk in client.chat.completions.create(**body, stream=True):
                for d in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                    got = streamed.setdefault(d.index, [d.id, "", ""])
                    got[1] += d.function.name or ""
                    got[2] += d.function.arguments or ""
            assert [tuple(v) for _, v in sorted(streamed.items())] == [
                (c.id, c.function.name, c.function.arguments) for c in recorded.tool_calls or []
            ]  # streaming answers the same calls
        # the replay is exact: a context the episode never sent is a miss, not a guess
        wrong = chat_request_body([ChatMessage(role="user", content="something else")], TOOLS)
        with pytest.raises(openai.NotFoundError, match="no recorded answer"):
            client.chat.completions.create(model="k3-tiny", **wrong)


# --------------------------------------------------------------------------- ATIF


def test_atif_export_validates_and_keeps_what_matters():
    traj = episode()
    doc = to_atif(traj)
    validate_atif(doc)
    assert doc["schema_version"] == "ATIF-v1.4" and doc["session_id"] == "ep-1"
    assert doc["agent"] == {"name": "codex", "version": "unknown", "model_name": "k3-tiny"}
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, 8))
    assert [s["source"] for s in doc["steps"]] == [
        "system",
        "user",
        "agent",
        "system",
        "agent",
        "system",
        "agent",
    ]
    first = doc["steps"][2]
    assert first["tool_calls"][0] == {
        "tool_call_id": "c1",
        "function_name": "shell",
        "arguments": {"cmd": "pytest -q"},
    }
    assert first["observation"]["results"][0] == {
        "source_call_id": "c1",
        "content": "1 failed, 3 passed",
    }
    assert first["metrics"]["completion_token_ids"] == [5, 6, 7, 8, 9, 10]
    assert first["metrics"]["extra"]["loss_mask"] == [1, 1, 1, 1, 1, 0]
    assert first["reasoning_content"] == "Run the tests first."
    assert doc["steps"][4]["metrics"]["cached_tokens"] == 120
    assert doc["steps"][4]["extra"]["k3stack"]["failed_calls"] == ["c3"]
    pause = doc["steps"][3]["extra"]["k3stack"]
    assert (pause["kind"], pause["sandbox_checkpoint_id"], pause["world_snapshot_id"]) == (
        "pause", "cp-3", "snap-2"
    )  # fmt: skip
    compaction = doc["steps"][5]["extra"]["k3stack"]
    assert compaction["kind"] == "compaction" and compaction["tokens_after"] == 40
    assert len(compaction["step"]["context"]) == 2  # the original step rides along
    assert doc["final_metrics"]["total_cached_tokens"] == 120
    k3 = doc["extra"]["k3stack"]
    assert k3["reward"] == 0.5 and k3["exit"]["status"] == "completed" and k3["seed"] == 7


def test_unparsable_tool_arguments_are_kept_raw():
    traj = Trajectory(id="ep-raw")
    traj.add_model_step(
        ChatMessage(
            role="assistant",
            tool_calls=[ToolCall(id="c", function=FunctionCall(name="f", arguments="{oops"))],
        )
    )
    doc = to_atif(traj)
    validate_atif(doc)
    assert doc["steps"][0]["tool_calls"][0]["arguments"] == {"_raw": "{oops"}


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d["agent"].pop("version"),
        lambda d: d["steps"][2]["tool_calls"][0].update(arguments='{"cmd": "x"}'),
        lambda d: d["steps"][0].update(source="tool"),
        lambda d: d["steps"][0].update(step_id=0),
        lambda d: d["steps"][1].update(metrics={"prompt_tokens": 3}),  # metrics only on agent steps
        lambda d: d["steps"][2]["metrics"].update(logprobs=["high"]),
        lambda d: d.update(unknown_field=1),
    ],
)
def test_schema_rejects_documents_that_break_the_rfc(breakage):
    doc = to_atif(episode())
    breakage(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate_atif(doc)


def test_own_atif_reads_back_exactly():
    traj = episode()
    assert from_atif(json.loads(json.dumps(to_atif(traj)))) == traj


HARBOR_LIKE = {
    "schema_version": "ATIF-v1.4",
    "session_id": "tbench-20251211/153500 a1b2",
    "agent": {"name": "terminus-2", "version": "2.0.1", "model_name": "k3"},
    "notes": "written by another agent",
    "steps": [
        {"step_id": 1, "source": "system", "message": "You are a terminal agent."},
        {"step_id": 2, "source": "user", "message": "Count the files."},
        {
            "step_id": 3,
            "timestamp": "2025-12-11T15:35:01Z",
            "source": "agent",
            "model_name": "k3",
            "message": "",
            "reasoning_content": "ls first",
            "tool_calls": [
                {"tool_call_id": "t1", "function_name": "bash", "arguments": {"command": "ls | wc -l"}}
            ],
            "observation": {
                "results": [
                    {"source_call_id": "t1", "content": "3"},
                    {"content": "[terminal] prompt is back"},
                ]
            },
            "metrics": {"prompt_tokens": 50, "completion_tokens": 7, "cached_tokens": 20,
                        "completion_token_ids": [1, 2, 3], "logprobs": [-0.1, -0.2, -0.3]},
        },
        {"step_id": 4, "source": "agent", "message": "There are 3 files."},
    ],
}  # fmt: skip


def test_other_agents_atif_imports_from_its_standard_fields():
    validate_atif(HARBOR_LIKE)
    traj = from_atif(HARBOR_LIKE)
    assert traj.id == "tbench-20251211-153500-a1b2"
    assert (traj.metadata.harness, traj.metadata.harness_version) == ("terminus-2", "2.0.1")
    assert traj.metadata.extra["atif"]["notes"] == "written by another agent"
    kinds = [s.kind for s in traj.steps]
    assert kinds == ["message", "message", "model", "message", "model"]
    turn = traj.steps[2]
    assert isinstance(turn, ModelStep)
    assert json.loads(turn.message.tool_calls[0].function.arguments) == {"command": "ls | wc -l"}
    assert turn.message.content is None and turn.message.reasoning_content == "ls first"
    assert [o.content for o in turn.observations] == ["3"]
    assert turn.generation.usage.cached_tokens == 20 and turn.generation.logprobs[-1] == -0.3
    assert turn.timestamp == datetime(2025, 12, 11, 15, 35, 1, tzinfo=UTC)
    last = list(traj.requests())[-1]
    assert [m.role for m in last.messages] == ["system", "user", "assistant", "tool", "user"]
    validate_atif(to_atif(traj))  # and it exports again


def test_module_docstring_example_runs():
    """The example the orchestrator follows is real code."""
    import shared.trajectory.schema as schema

    doc = schema.__doc__
    block = doc[doc.index("Building one as an episode runs::") :].split("::", 1)[1]
    code = "\n".join(
        line[4:] for line in block.split("\nExporters:")[0].splitlines() if line.strip()
    )
    scope: dict = {"tools": TOOLS}
    exec(code, scope)  # noqa: S102 - our own docstring
    assert scope["same"] == scope["traj"] and scope["body"]["messages"][1]["role"] == "user"
    assert scope["traj"].exit.status == "completed"
