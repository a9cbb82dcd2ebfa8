"""Model-judged checks: declared by scenarios, resolved here, executed by the verifier.

A judge check names a ``rubric`` and ``inputs``; each input is a selector
``{"app": "gmail", "select": "sent", …predicate-style args}``. This service resolves the
selectors to content (the mails the agent sent in that thread, …) and exposes them with the
rubric at ``GET /worlds/{id}/checks``; the verifier service runs the judge model on them.
"""

from __future__ import annotations

from typing import Any

from services.tools.context import WorldContext


def resolve_inputs(ctx: WorldContext, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for spec in inputs:
        app = spec.get("app")
        args = {k: v for k, v in spec.items() if k not in ("app", "select")}
        items: list[dict[str, Any]] = []
        if app == "gmail":
            from services.tools.events.ops.gmail import resolve_input

            items = resolve_input(ctx, args)
        out.append({"selector": spec, "items": items})
    return out
