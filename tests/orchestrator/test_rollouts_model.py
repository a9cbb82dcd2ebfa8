"""Rollouts on the platform's own model service (reference engine, tiny preset, the defaults
``k3stack up`` serves), no scripted endpoint: four samples with tools, every turn a tool call
(``tool_choice: required``, the model service's tool grammar over a token prompt), each runs
past step 5 with tool results in its context; a bump to v2 mid-batch pauses each at a tick and
resumes it on v2; the ids the samples sent are a replay of the
conversation through the model's own chat template: the whole text is the template's render,
and every run of ids the harness added (first prompt, tool results) is the template's ids for
them in the full conversation."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from services.orchestrator.harness.config import load_harness
from services.orchestrator.rollouts.export import sample_record
from services.orchestrator.rollouts.models import RolloutRow, SampleRow
from services.orchestrator.rollouts.schema import RolloutCreate, RolloutIterate
from services.orchestrator.rollouts.service import create_rollout, iterate, rollout_view
from services.orchestrator.rollouts.tasks import run_inline
from services.orchestrator.rollouts.xtml import parse_turn
from services.orchestrator.tools.builtin import toolset_of

STEPS = 6


def _tokenize(http: httpx.Client, messages: list[dict], gen: bool, **extra: Any) -> dict:
    body = {"messages": messages, "add_generation_prompt": gen, **extra}
    resp = http.post("/tokenize", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _replayed(http: httpx.Client, rec: dict, tools: list[dict], effort: str) -> None:
    """The sample's ids against renders of its own conversation (see the module doc)."""
    segs, ids = rec["segments"], rec["tokens"]["ids"]
    messages = [dict(m) for m in rec["messages"]]
    asst = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    assert len(asst) == len(segs) == rec["steps"]
    for i, seg in zip(asst, segs, strict=True):  # each turn carries what the model wrote
        text = http.post("/detokenize", json={"tokens": ids[seg["completion_start"]:
                                                             seg["end"]]}).json()["prompt"]  # fmt: skip
        turn = parse_turn(text)
        messages[i]["reasoning_content"] = turn.reasoning
        calls = [(c["function"]["name"], c["function"]["arguments"])
                 for c in messages[i].get("tool_calls") or []]  # fmt: skip
        assert calls == [(c["name"], c["arguments"]) for c in turn.calls] and calls
    extra = {"reasoning_effort": effort}
    whole = _tokenize(http, messages[: asst[-1] + 1], False, tools=tools, **extra)
    sent = http.post("/detokenize", json={"tokens": ids}).json()["prompt"]
    at = next(
        (i for i, (a, b) in enumerate(zip(sent, whole["text"], strict=False)) if a != b),
        min(len(sent), len(whole["text"])),
    )
    assert sent == whole["text"], (sent[at - 300 : at + 100], [s["finish_reason"] for s in segs])
    first = _tokenize(http, messages[: asst[0]], True, tools=tools, **extra)["tokens"]
    assert ids[: segs[0]["completion_start"]] == first
    for k in range(1, len(segs)):  # the tool results' ids, as the whole conversation has them
        before = _tokenize(http, messages[: asst[k - 1] + 1], False, tools=tools, **extra)
        upto = _tokenize(http, messages[: asst[k]], True, tools=tools, **extra)
        assert [m["role"] for m in messages[asst[k - 1] + 1 : asst[k]]][0] == "tool"
        added = ids[segs[k]["prompt_start"] : segs[k]["completion_start"]]
        assert added == upto["tokens"][len(before["tokens"]) :]
        assert upto["text"].startswith(before["text"])


def _steps(db, ids: list[str]) -> list[int]:  # type: ignore[no-untyped-def]
    with db.session() as s:
        return [(s.get(SampleRow, i).state or {}).get("step", 0) for i in ids]


def test_tool_rollout_on_the_model_service(orch_db, services, model_url) -> None:
    body = RolloutCreate.model_validate({
        "tasks": [{"instruction": "Make a plan, then run it."},
                  {"instruction": "List the files, then read one."}],
        "samples_per_task": 2, "harness": "codex", "lam": 1.0, "effort": "low",
        "policy": {"base_url": f"{model_url}/v1", "version": "v1", "temperature": 1.0,
                   "seed": 11, "tool_choice": "required"},
        "budgets": {"max_steps": STEPS, "max_output_tokens": 64},
    })  # fmt: skip
    queued: list[str] = []
    rid = create_rollout(orch_db, body, queued.append, "rollouts")
    threads = [threading.Thread(target=run_inline, args=(orch_db, services, i)) for i in queued]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 200
    while min(_steps(orch_db, queued)) < 1:  # every sample past its first call: bump to v2
        assert time.monotonic() < deadline and all(t.is_alive() for t in threads)
        time.sleep(0.1)
    bump = RolloutIterate.model_validate({"policy": {**body.policy.model_dump(), "version": "v2"}})
    iterate(orch_db, rid, bump, lambda _i: None)
    for t in threads:
        t.join(timeout=max(1.0, deadline + 40 - time.monotonic()))
    assert not any(t.is_alive() for t in threads)
    view = rollout_view(orch_db, rid)
    assert view.counts == {"finished": 4}, [(s.id, s.error) for s in view.samples]
    for sample in view.samples:  # each paused at a tick and resumed on v2
        assert [v.version for v in sample.versions] == ["v1", "v2"], sample
    with orch_db.session() as s:
        assert s.get(RolloutRow, rid).history[-1]["resumed"] == 4
    tools = toolset_of(load_harness("codex", services.settings.data_dir).tools).specs()
    with httpx.Client(base_url=f"{model_url}/v1", timeout=60.0) as http:
        for sid in queued:
            with orch_db.session() as s:
                row = s.get(SampleRow, sid)
                s.expunge(row)
            rec = sample_record(orch_db, row)
            assert rec["steps"] == STEPS, rec["exit_reason"]
            roles = [m["role"] for m in rec["messages"]]
            assert roles.count("tool") >= STEPS - 1  # results before the last turns, in context
            _replayed(http, rec, tools, "low")


def test_the_xtml_reader_inverts_the_template_for_a_turn() -> None:
    text = (
        "plan[close]think[sep][open]response[sep]ok[close]response[sep][open]tools[sep]"
        '[open]call tool="exec_command" index:=0[sep][open]arg name="cmd"[sep]ls "a"'
        '[close]arg[sep][open]arg name="n" type="json"[sep]{"x":[1]}[close]arg[sep]'
        '[close]call[sep][open]call tool="raw" index:=1[sep][open]json[sep][1,2]'
        '[close]json[sep][close]call[sep][open]call tool="cut" index:=2[sep][open]arg'
    )
    turn = parse_turn(text)
    assert (turn.reasoning, turn.content) == ("plan", "ok")
    assert turn.calls == [
        {"name": "exec_command", "arguments": '{"cmd": "ls \\"a\\"", "n": {"x": [1]}}'},
        {"name": "raw", "arguments": "[1,2]"},
    ]  # the cut third call is left out
    assert parse_turn("no markers").content == "no markers"
