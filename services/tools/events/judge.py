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
    """Each selector's content: a conversation (``thread_of``, ``dm_with``, ``channel``,
    ``to_any``) through ``say``; anything else through the app's own ``ops.resolve_input``."""
    from services.tools.db import app_module
    from services.tools.events.ops.say import CONVERSATION_KEYS
    from services.tools.events.ops.say import resolve_input as said

    out = []
    for spec in inputs:
        app = str(spec.get("app", ""))
        args = {k: v for k, v in spec.items() if k not in ("app", "select")}
        mod = app_module(app, "ops") if app.isidentifier() else None
        if CONVERSATION_KEYS & set(args) or not hasattr(mod, "resolve_input"):
            items = said(ctx, args | ({"app": app} if app else {}))
        else:
            items = mod.resolve_input(ctx, args)  # type: ignore[union-attr]
        out.append({"selector": spec, "items": items})
    return out
