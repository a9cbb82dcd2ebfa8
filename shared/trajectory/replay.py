"""Export a trajectory to the model service's ``replay`` engine format (JSON Lines).

One line per model call: ``{"kind": "chat", "request": …, "response": …}`` — the request as
the harness sent it (rebuilt by :meth:`Trajectory.requests`), the answer as a
``chat.completion``. The engine computes each line's fingerprint from ``request`` on load, so a
harness that sends the same requests again gets the recorded answers back, tool calls and all:
a recorded episode replays exactly, without a model.

:func:`chat_request_body` (also :meth:`Trajectory.next_request_body`) is the one place a chat
request body is built from a context; a harness that builds its live calls with it sends
requests a replay file will match.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shared.trajectory.schema import Request, Trajectory, chat_request_body

__all__ = ["chat_request_body", "to_replay_lines", "write_replay_file"]


def _response(req: Request, model: str) -> dict[str, Any]:
    step, gen = req.step, req.step.generation
    message = step.message.model_dump(
        mode="json", exclude_none=True, include={"content", "reasoning_content", "tool_calls"}
    )
    finish = gen.finish_reason or ("tool_calls" if step.message.tool_calls else "stop")
    out: dict[str, Any] = {
        "id": gen.response_id or f"chatcmpl-replay-{req.step_index}",
        "object": "chat.completion",
        "created": int(step.timestamp.timestamp()),
        "model": gen.model or model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
    }
    if gen.usage is not None:
        out["usage"] = gen.usage.model_dump(mode="json", exclude_none=True)
    return out


def to_replay_lines(traj: Trajectory) -> list[dict[str, Any]]:
    """One replay entry per model call, in order."""
    model = traj.metadata.model or "replay"
    return [
        {
            "kind": "chat",
            "request": r.body(model=model),
            "response": _response(r, model),
        }
        for r in traj.requests()
    ]


def write_replay_file(traj: Trajectory, path: Path) -> int:
    """Write (overwrite) ``path``; returns the number of recorded calls."""
    lines = to_replay_lines(traj)
    path.write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8"
    )
    return len(lines)
