"""Export a trajectory to Harbor's Agent Trajectory Interchange Format (ATIF v1.4).

Mapping: system/developer messages are ``system`` steps, user messages ``user`` steps, each
model call one ``agent`` step (message, reasoning, tool calls with parsed arguments, the
observations as ``observation.results`` keyed by ``source_call_id``, usage and token-level data
as ``metrics``; the loss mask, finish reason and weight version under ``metrics.extra``).
ATIF has no compaction or pause step: both become ``system`` steps whose ``extra.k3stack``
says what they were (the new context, the checkpoint + snapshot pair). The k3stack metadata
(task, seed, reward, per-event results, exit) goes under the root ``extra.k3stack``.

ATIF cannot say everything a trajectory holds (request options, raw argument strings, the loss
mask's meaning...), so each step's ``extra.k3stack.step`` carries the original step and the root
``extra.k3stack.trajectory`` the rest: :func:`from_atif` reads our own exports back exactly, and
reads any other ATIF document (Harbor's installed agents, say) from its standard fields.

``ATIF_SCHEMA`` is a JSON Schema written from the RFC's field list; :func:`validate_atif`
checks a document against it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from shared.chat import ChatMessage, ContentPart, FunctionCall, ToolCall, Usage
from shared.trajectory.schema import (
    CompactionStep,
    Generation,
    MessageStep,
    Metadata,
    ModelStep,
    Observation,
    PauseStep,
    Step,
    Trajectory,
)

ATIF_VERSION = "ATIF-v1.4"
ATIF_SCHEMA = Path(__file__).with_name("atif-v1.4.schema.json")
_SOURCE = {"system": "system", "developer": "system", "user": "user", "assistant": "agent"}


def _text(content: str | list[ContentPart] | None) -> str:
    return ChatMessage(role="assistant", content=content).text()


def _arguments(raw: str) -> dict[str, Any]:
    """ATIF wants an object; a model's unparsable or non-object arguments are kept raw."""
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _iso(ts: Any) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def _model_step(step: ModelStep, step_id: int) -> dict[str, Any]:
    msg, gen = step.message, step.generation
    usage = gen.usage
    out: dict[str, Any] = {
        "step_id": step_id,
        "timestamp": _iso(step.timestamp),
        "source": "agent",
        "model_name": gen.model,
        "reasoning_effort": step.options.get("reasoning_effort"),
        "message": msg.text(),
        "reasoning_content": msg.reasoning_content,
    }
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "tool_call_id": c.id,
                "function_name": c.function.name,
                "arguments": _arguments(c.function.arguments),
            }
            for c in msg.tool_calls
        ]
    if step.observations:
        out["observation"] = {
            "results": [
                {"source_call_id": o.tool_call_id, "content": _text(o.content)}
                for o in step.observations
            ]
        }
        errors = [o.tool_call_id for o in step.observations if o.is_error]
        if errors:
            out["extra"] = {"k3stack": {"failed_calls": errors}}
    out["metrics"] = _clean(
        {
            "prompt_tokens": usage.prompt_tokens if usage else None,
            "completion_tokens": usage.completion_tokens if usage else None,
            "cached_tokens": usage.cached_tokens if usage else None,
            "prompt_token_ids": gen.prompt_token_ids,
            "completion_token_ids": gen.completion_token_ids,
            "logprobs": gen.logprobs,
            "extra": _clean(
                {
                    "loss_mask": gen.loss_mask,
                    "finish_reason": gen.finish_reason,
                    "weight_version": gen.weight_version,
                }
            ),
        }
    )
    return _clean(out)


def _step(step: Step, step_id: int) -> dict[str, Any]:
    if isinstance(step, ModelStep):
        return _model_step(step, step_id)
    base = {"step_id": step_id, "timestamp": _iso(step.timestamp), "source": "system"}
    if isinstance(step, MessageStep):
        m = step.message
        item = {**base, "source": _SOURCE.get(m.role, "system"), "message": m.text()}
        if m.role == "tool":
            item["observation"] = {
                "results": [{"source_call_id": m.tool_call_id, "content": m.text()}]
            }
        return item
    if isinstance(step, CompactionStep):
        info = step.model_dump(include={"strategy", "tokens_before", "tokens_after"})
        return {
            **base,
            "message": step.summary or "",
            "extra": {"k3stack": {"kind": "compaction", **info}},
        }
    if isinstance(step, PauseStep):
        info = step.point.model_dump(mode="json")
        return {
            **base,
            "message": step.reason or "",
            "extra": {"k3stack": {"kind": "pause", **info}},
        }
    raise TypeError(f"unknown step {type(step).__name__}")


def to_atif(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as an ATIF document (a JSON-ready dict)."""
    meta = traj.metadata
    steps: list[dict[str, Any]] = []
    for step in traj.steps:
        item = _step(step, len(steps) + 1)
        k3 = item.setdefault("extra", {}).setdefault("k3stack", {})
        k3["step"] = step.model_dump(mode="json")
        steps.append(item)
    usage = traj.usage()
    k3 = {
        "format_version": traj.format_version,
        "task": meta.task,
        "seed": meta.seed,
        "reward": meta.reward,
        "event_results": [e.model_dump(mode="json") for e in meta.event_results],
        "exit": traj.exit.model_dump(mode="json") if traj.exit else None,
        "tools": [t.model_dump(mode="json", exclude_none=True) for t in traj.tools],
        **({"extra": meta.extra} if meta.extra else {}),
        "trajectory": traj.model_dump(mode="json", exclude={"steps"}),
    }
    return {
        "schema_version": ATIF_VERSION,
        "session_id": traj.id,
        "agent": _clean(
            {
                "name": meta.harness or "k3stack",
                "version": meta.harness_version or "unknown",
                "model_name": meta.model,
            }
        ),
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": usage.prompt_tokens,
            "total_completion_tokens": usage.completion_tokens,
            "total_cached_tokens": usage.cached_tokens,
            "total_steps": len(steps),
        },
        "extra": {"k3stack": k3},
    }


@cache
def atif_schema() -> dict[str, Any]:
    return json.loads(ATIF_SCHEMA.read_text(encoding="utf-8"))


def validate_atif(doc: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when ``doc`` is not valid ATIF v1.4."""
    import jsonschema

    jsonschema.validate(doc, atif_schema(), cls=jsonschema.Draft202012Validator)


# --------------------------------------------------------------------------- reading


def _when(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return datetime.now(UTC)


def _session_id(value: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", value).lstrip("_.-")[:64]
    return cleaned or "atif"


def _generation(step: dict[str, Any]) -> Generation:
    m = step.get("metrics") or {}
    extra = m.get("extra") or {}
    usage = None
    if "prompt_tokens" in m or "completion_tokens" in m:
        prompt, completion = m.get("prompt_tokens", 0), m.get("completion_tokens", 0)
        usage = Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details={"cached_tokens": m.get("cached_tokens", 0)},
        )
    return Generation(
        model=step.get("model_name"),
        usage=usage,
        finish_reason=extra.get("finish_reason"),
        prompt_token_ids=m.get("prompt_token_ids"),
        completion_token_ids=m.get("completion_token_ids"),
        logprobs=m.get("logprobs"),
        loss_mask=extra.get("loss_mask"),
        weight_version=extra.get("weight_version"),
    )


def _foreign_steps(item: dict[str, Any]) -> list[Step]:
    """One ATIF step as k3stack steps (an agent turn's non-tool feedback follows it)."""
    when = _when(item.get("timestamp"))
    text = item.get("message") or ""
    results = (item.get("observation") or {}).get("results") or []
    if item["source"] != "agent":
        role = "system" if item["source"] == "system" else "user"
        out: list[Step] = [
            MessageStep(message=ChatMessage(role=role, content=text), timestamp=when)
        ]
        out += [
            MessageStep(
                message=ChatMessage(role="user", content=r.get("content") or ""), timestamp=when
            )
            for r in results
        ]
        return out
    calls = [
        ToolCall(
            id=c["tool_call_id"],
            function=FunctionCall(
                name=c["function_name"],
                arguments=c["arguments"]["_raw"]
                if set(c["arguments"]) == {"_raw"}
                else json.dumps(c["arguments"], ensure_ascii=False),
            ),
        )
        for c in item.get("tool_calls") or []
    ]
    ids = {c.id for c in calls}
    message = ChatMessage(
        role="assistant",
        content=text or None,
        reasoning_content=item.get("reasoning_content"),
        tool_calls=calls or None,
    )
    options = {"reasoning_effort": item["reasoning_effort"]} if "reasoning_effort" in item else {}
    model_step = ModelStep(
        message=message,
        generation=_generation(item),
        options=options,
        observations=[
            Observation(
                tool_call_id=r["source_call_id"], content=r.get("content") or "", timestamp=when
            )
            for r in results
            if r.get("source_call_id") in ids
        ],
        timestamp=when,
    )
    feedback = [
        MessageStep(
            message=ChatMessage(role="user", content=r.get("content") or ""), timestamp=when
        )
        for r in results
        if r.get("source_call_id") not in ids
    ]
    return [model_step, *feedback]


def from_atif(doc: dict[str, Any]) -> Trajectory:
    """A trajectory from an ATIF document: exact for :func:`to_atif`'s output, from the
    standard fields for anyone else's."""
    k3 = (doc.get("extra") or {}).get("k3stack") or {}
    kept = [((s.get("extra") or {}).get("k3stack") or {}).get("step") for s in doc["steps"]]
    if "trajectory" in k3 and all(kept):
        return Trajectory.model_validate({**k3["trajectory"], "steps": kept})
    agent = doc.get("agent") or {}
    steps: list[Step] = []
    for item in doc["steps"]:
        steps += _foreign_steps(item)
    extra = {k: doc[k] for k in ("notes", "final_metrics", "extra") if k in doc}
    return Trajectory(
        id=_session_id(str(doc["session_id"])),
        metadata=Metadata(
            harness=agent.get("name"),
            harness_version=agent.get("version"),
            model=agent.get("model_name"),
            extra={"atif": extra} if extra else {},
        ),
        steps=steps,
    )
