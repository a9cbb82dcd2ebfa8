"""Export a trajectory to Harbor's Agent Trajectory Interchange Format (ATIF v1.4).

Mapping: system/developer messages are ``system`` steps, user messages ``user`` steps, each
model call one ``agent`` step (message, reasoning, tool calls with parsed arguments, the
observations as ``observation.results`` keyed by ``source_call_id``, usage and token-level data
as ``metrics``; the loss mask, finish reason and weight version under ``metrics.extra``).
ATIF has no compaction or pause step: both become ``system`` steps whose ``extra.k3stack``
says what they were (the new context, the checkpoint + snapshot pair). The k3stack metadata
(task, seed, reward, per-event results, exit) goes under the root ``extra.k3stack``.

``ATIF_SCHEMA`` is a JSON Schema written from the RFC's field list; :func:`validate_atif`
checks a document against it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from shared.chat import ChatMessage, ContentPart
from shared.trajectory.schema import (
    CompactionStep,
    MessageStep,
    ModelStep,
    PauseStep,
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


def to_atif(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as an ATIF document (a JSON-ready dict)."""
    meta = traj.metadata
    steps: list[dict[str, Any]] = []
    for step in traj.steps:
        step_id = len(steps) + 1
        if isinstance(step, ModelStep):
            steps.append(_model_step(step, step_id))
            continue
        base = {"step_id": step_id, "timestamp": _iso(step.timestamp), "source": "system"}
        if isinstance(step, MessageStep):
            m = step.message
            item = {**base, "source": _SOURCE.get(m.role, "system"), "message": m.text()}
            if m.role == "tool":
                item["observation"] = {
                    "results": [{"source_call_id": m.tool_call_id, "content": m.text()}]
                }
            steps.append(item)
        elif isinstance(step, CompactionStep):
            info = step.model_dump(mode="json", exclude={"timestamp", "kind"}, exclude_none=True)
            steps.append(
                {
                    **base,
                    "message": step.summary or "",
                    "extra": {"k3stack": {"kind": "compaction", **info}},
                }
            )
        elif isinstance(step, PauseStep):
            info = step.point.model_dump(mode="json")
            steps.append(
                {
                    **base,
                    "message": step.reason or "",
                    "extra": {"k3stack": {"kind": "pause", **info}},
                }
            )
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
