"""An episode's trajectory as one JSON document, and its artefacts in the object store.

The document lists items in order (system, user, assistant, tool, clock, compaction, score,
error) with their segment: each compaction ends one segment and starts the next, and its
item names both, so a reader can walk the segments in order.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from sqlalchemy import select

from services.orchestrator.episode.journal import current_state
from services.orchestrator.episode.models import EpisodeRow, TrajectoryItemRow
from services.orchestrator.episode.platform import Services
from services.orchestrator.episode.stop import Outcome
from shared.db import ServiceDatabase

FORMAT = "k3stack.trajectory/orchestrator-1"


def trajectory(db: ServiceDatabase, episode_id: str) -> dict[str, Any] | None:
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        if row is None:
            return None
        items = s.scalars(
            select(TrajectoryItemRow)
            .where(TrajectoryItemRow.episode_id == episode_id)
            .order_by(TrajectoryItemRow.seq)
        ).all()
        req = row.request or {}
        state = current_state(s, row)
        return {
            "format": FORMAT,
            "episode_id": episode_id,
            "harness": req.get("harness"),
            "policy": (req.get("policy") or {}).get("kind"),
            "task": req.get("task"),
            "status": row.status,
            "attempts": row.attempts,
            "reward": row.reward,
            "result": row.result,
            "usage": state.usage.model_dump(),
            "error_message": row.error_message,
            "segments": state.segment + 1,
            "items": [
                {
                    "seq": i.seq,
                    "segment": i.segment,
                    "kind": i.kind,
                    "at": (i.at if i.at.tzinfo else i.at.replace(tzinfo=UTC)).isoformat(),
                    **i.body,
                }
                for i in items
            ],  # fmt: skip
        }


def write_artifacts(db: ServiceDatabase, svc: Services, episode_id: str) -> str | None:
    """Trajectory JSON and HTML report side by side; returns the prefix they live under."""
    from services.orchestrator.report import render_report

    if svc.objects is None:
        return None
    doc = trajectory(db, episode_id)
    if doc is None:
        return None
    prefix = f"orchestrator/episodes/{episode_id}"
    svc.objects.put(f"{prefix}/trajectory.json", to_shared(doc).to_json().encode())
    svc.objects.put(f"{prefix}/report.html", render_report(doc).encode())
    return prefix


def to_shared(doc: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The platform's versioned trajectory (``shared.trajectory``) from an episode's items:
    model calls with their observations and request options, compaction boundaries carrying
    the new context, the score as metadata and exit."""
    from services.orchestrator.exchanges import add_exchange
    from shared.chat import ChatMessage, ToolDefinition, Usage
    from shared.trajectory import EventResult, Generation, Trajectory

    specs = next((i["tools"] for i in doc["items"] if i["kind"] == "tools"), [])
    traj = Trajectory(id=doc["episode_id"], tools=[ToolDefinition.model_validate(t) for t in specs])
    task = doc.get("task") or {}
    meta = traj.metadata
    meta.harness, meta.task, meta.seed = doc.get("harness"), task.get("scenario"), task.get("seed")
    clock, errors, pending, runtime = [], [], set(), None
    for it in doc["items"]:
        kind, at = it["kind"], it["at"]
        if kind in ("system", "user"):
            traj.add_message(ChatMessage.model_validate(it["message"]), timestamp=at)
        elif kind == "assistant":
            usage = it.get("usage") or {}
            gen = Generation(
                model=it.get("model") or None,
                usage=Usage(
                    prompt_tokens=usage.get("prompt_tokens", 0),
                    completion_tokens=usage.get("completion_tokens", 0),
                    total_tokens=usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
                )
                if usage
                else None,
                finish_reason=it.get("finish_reason"),
                completion_token_ids=it.get("token_ids"),
                logprobs=it.get("logprobs"),
                latency_ms=it.get("latency_ms"),
            )
            meta.model = meta.model or gen.model
            message = dict(it["message"])
            if it.get("reasoning"):
                message["reasoning_content"] = it["reasoning"]
            traj.add_model_step(
                ChatMessage.model_validate(message), gen, options=it.get("options") or {},
                timestamp=at,
            )  # fmt: skip
        elif kind == "tool":
            traj.add_observation(
                it["call_id"],
                it["observation"],
                is_error=bool(it.get("is_error")),
                duration_ms=it.get("duration_ms"),
                timestamp=at,
                metadata={
                    "segment": it.get("segment", 0),
                    **{k: it.get(k) for k in ("name", "idempotency_key", "replayed")},
                },
            )
        elif kind == "compaction":
            traj.add_compaction(
                [ChatMessage.model_validate(m) for m in it.get("context") or []],
                strategy=it.get("policy", "summary"),
                summary=it.get("summary"),
                tokens_before=it.get("tokens_before"),
                tokens_after=it.get("tokens_after"),
                timestamp=at,
                generation=_summary_generation(it),
            )
        elif kind == "agent":  # an installed agent: the real CLI and its version
            meta.harness, meta.harness_version = it["name"], it["version"]
            runtime = it.get("runtime")
        elif kind == "exchange":  # one model call of an installed agent, via the gateway
            add_exchange(traj, it, pending)
            meta.model = meta.model or traj.steps[-1].generation.model
        elif kind == "clock":
            clock.append({k: it.get(k) for k in ("from", "to", "day", "fired")})
        elif kind == "error":
            errors.append({k: it.get(k) for k in ("where", "message")})
    result = doc.get("result") or {}
    meta.reward = doc.get("reward")
    meta.event_results = [
        EventResult(event_id=e["event_id"], passed=bool(e.get("passed")), detail=e.get("title"))
        for e in result.get("events") or []
    ]
    meta.extra = {"policy": doc.get("policy"), "clock": clock, "errors": errors,
                  "state_hash": result.get("state_hash"), "full_hash": result.get("full_hash"),
                  **({"agent_runtime": runtime} if runtime else {})}  # fmt: skip
    status = doc.get("status")
    if status in ("succeeded", "failed", "cancelled"):
        reason = (result or {}).get("exit_reason")
        if status == "cancelled":
            traj.finish("cancelled", reward=meta.reward)
        elif status == "failed":
            traj.finish("error", reason=doc.get("error_message"), reward=meta.reward)
        else:
            exit_status = Outcome.of(reason).trajectory_exit
            traj.finish(exit_status, reason=reason, reward=meta.reward)  # type: ignore[arg-type]
    return traj


def _summary_generation(item: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The summarising model call of a compaction item, when one was made."""
    from shared.chat import Usage
    from shared.trajectory import Generation

    usage = item.get("usage")
    if not usage:
        return None
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return Generation(
        model=item.get("model") or None,
        usage=Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        ),
        latency_ms=item.get("latency_ms"),
    )
