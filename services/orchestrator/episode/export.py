"""An episode's trajectory as one JSON document, and its artefacts in the object store.

The document lists items in order (system, user, assistant, tool, clock, compaction, score,
error) with their segment: each compaction ends one segment and starts the next, and its
item names both, so a reader can walk the segments in order.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from services.orchestrator.episode.models import EpisodeRow, TrajectoryItemRow

FORMAT = "k3stack.trajectory/orchestrator-1"


def trajectory(db: Any, episode_id: str) -> dict[str, Any] | None:
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
        state = row.state or {}
        return {
            "format": FORMAT,
            "episode_id": episode_id,
            "harness": req.get("harness"),
            "policy": (req.get("policy") or {}).get("kind"),
            "task": req.get("task"),
            "status": row.status,
            "reward": row.reward,
            "result": row.result,
            "usage": state.get("usage"),
            "segments": state.get("segment", 0) + 1,
            "items": [
                {
                    "seq": i.seq,
                    "segment": i.segment,
                    "kind": i.kind,
                    "at": i.at.isoformat(),
                    **i.body,
                }
                for i in items
            ],  # fmt: skip
        }


def write_artifacts(db: Any, svc: Any, episode_id: str) -> str | None:
    """Trajectory JSON and HTML report side by side; returns the prefix they live under."""
    from services.orchestrator.report import render_report

    doc = trajectory(db, episode_id)
    if doc is None or svc.objects is None:
        return None
    prefix = f"orchestrator/episodes/{episode_id}"
    svc.objects.put(f"{prefix}/trajectory.json", json.dumps(doc, indent=1).encode())
    svc.objects.put(f"{prefix}/report.html", render_report(doc).encode())
    return prefix
