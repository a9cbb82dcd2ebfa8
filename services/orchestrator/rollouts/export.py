"""RL-ready exports of a batch: JSONL (one sample a line) and ATIF v1.4 (one document a
sample, validated against ``shared/trajectory``'s schema).

Token ids are stored once. JSONL: each sample's ``tokens.ids`` is the whole sequence (the last
prompt plus the last completion), with parallel ``loss_mask`` (1 on generated tokens),
``logprobs`` (null on context tokens and wherever the endpoint gave none: never 0.0, which a
trainer reads as probability 1) and ``versions`` (the policy version of each generated token,
null on context tokens); ``segments`` say where each model call's prompt ended and its
completion began. ATIF: each agent step's ``metrics.prompt_token_ids`` holds only the ids added
since the previous step (so a step's full prompt is the concatenation of the earlier steps'
prompt and completion ids, ``extra.k3stack.prompt_is_delta``); a step's ``logprobs`` are left
out when any is missing (ATIF's are numbers). A document's agent version names the policy
versions that produced its tokens, in order (``v1+v2``), not the batch's latest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from services.orchestrator.episode.state import EpisodeState
from services.orchestrator.rollouts.models import RolloutRow, SampleRow
from services.orchestrator.rollouts.sample import segments_of
from services.orchestrator.rollouts.service import samples_of, version_spans
from services.orchestrator.rollouts.tokens import Segment
from shared.db import ServiceDatabase

FORMATS = ("jsonl", "atif")


def sample_record(db: ServiceDatabase, row: SampleRow) -> dict[str, Any]:
    segs = segments_of(db, row.id)
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float | None] = []
    versions: list[str | None] = []
    bounds = []
    for seg in segs:
        start = len(ids)
        ids += seg.prompt_ids + seg.completion_ids
        mask += [0] * len(seg.prompt_ids) + [1] * len(seg.completion_ids)
        logprobs += [None] * len(seg.prompt_ids) + seg.logprobs
        versions += [None] * len(seg.prompt_ids) + [seg.version] * len(seg.completion_ids)
        bounds.append({"prompt_start": start, "completion_start": start + len(seg.prompt_ids),
                       "end": len(ids), "version": seg.version,
                       "finish_reason": seg.finish_reason})  # fmt: skip
    state = EpisodeState.of(row.state)
    spans, _ = version_spans(db, row.id)
    return {
        "id": row.id, "rollout_id": row.rollout_id, "task_index": row.task_index, "k": row.k,
        "phase": row.phase, "reward": row.reward, "exit_reason": state.exit_reason,
        "steps": state.step, "messages": state.messages,
        "tokens": {"ids": ids, "loss_mask": mask, "logprobs": logprobs, "versions": versions},
        "segments": bounds, "version_spans": [s.model_dump() for s in spans],
    }  # fmt: skip


def atif_document(db: ServiceDatabase, row: SampleRow, agent_version: str) -> dict[str, Any]:
    rec = sample_record(db, row)
    segs = segments_of(db, row.id)
    steps: list[dict[str, Any]] = []
    seg_i = 0
    results: dict[str, dict[str, Any]] = {}
    for m in rec["messages"]:
        role = m.get("role")
        if role in ("system", "user"):
            steps.append({"source": role, "message": m.get("content") or ""})
        elif role == "assistant":
            step: dict[str, Any] = {"source": "agent", "message": m.get("content") or ""}
            calls = []
            for c in m.get("tool_calls") or []:
                try:
                    args = json.loads(c["function"]["arguments"] or "{}")
                except ValueError:
                    args = None
                calls.append({"tool_call_id": c["id"], "function_name": c["function"]["name"]
                              or "unnamed", "arguments": args if isinstance(args, dict)
                              else {"_raw": c["function"]["arguments"]}})  # fmt: skip
            if calls:
                step["tool_calls"] = calls
                step["observation"] = {"results": []}
                for c in calls:
                    results[c["tool_call_id"]] = step
            if seg_i < len(segs):
                seg = segs[seg_i]
                seg_i += 1
                step["metrics"] = {
                    "prompt_tokens": len(seg.prompt_ids), "completion_tokens":
                    len(seg.completion_ids), "prompt_token_ids": seg.prompt_ids,
                    "completion_token_ids": seg.completion_ids,
                    **({"logprobs": seg.logprobs} if None not in seg.logprobs else {}),
                    "extra": {"k3stack": {"version": seg.version, "prompt_is_delta": True,
                                          "finish_reason": seg.finish_reason,
                                          "loss_mask": "completion_token_ids"}},
                }  # fmt: skip
            steps.append(step)
        elif role == "tool" and m.get("tool_call_id") in results:
            results[m["tool_call_id"]]["observation"]["results"].append(
                {"source_call_id": m["tool_call_id"], "content": m.get("content") or ""}
            )
    for i, step in enumerate(steps, 1):
        step["step_id"] = i
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": row.id,
        "agent": {"name": "k3stack-rollout", "version": produced_by(segs) or agent_version},
        "steps": steps,
        "final_metrics": {
            "total_completion_tokens": sum(len(s.completion_ids) for s in segs),
            "total_steps": len(steps),
        },
        "extra": {"k3stack": {"reward": rec["reward"], "phase": rec["phase"],
                              "exit_reason": rec["exit_reason"],
                              "version_spans": rec["version_spans"],
                              "task_index": row.task_index, "k": row.k}},
    }  # fmt: skip


def produced_by(segs: list[Segment]) -> str:
    """The policy versions that produced a sample's tokens, in order, each once (``v1+v2``);
    empty when it generated nothing yet."""
    return "+".join(dict.fromkeys(s.version for s in segs))


def export_lines(db: ServiceDatabase, rollout_id: str, fmt: str) -> Iterator[str]:
    """The export, one JSON line per sample (an ATIF document a line for ``atif``)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    with db.session() as s:
        roll = s.get(RolloutRow, rollout_id)
        if roll is None:
            raise KeyError(rollout_id)
        version = str(roll.policy.get("version"))
    for row in samples_of(db, rollout_id):
        if fmt == "jsonl":
            doc = sample_record(db, row)
        else:
            doc = atif_document(db, row, version)
        yield json.dumps(doc) + "\n"
