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
    from services.tools.db import tools_apps
    from services.tools.events.ops.say import CONVERSATION_KEYS
    from services.tools.events.ops.say import resolve_input as said

    resolvers = {a.name: a.resolve_input for a in tools_apps() if a.resolve_input is not None}
    out = []
    for spec in inputs:
        app = str(spec.get("app", ""))
        args = {k: v for k, v in spec.items() if k not in ("app", "select")}
        own = resolvers.get(app)
        if CONVERSATION_KEYS & set(args) or own is None:
            items = said(ctx, args | ({"app": app} if app else {}))
        else:
            items = own(ctx, args)
        out.append({"selector": spec, "items": items})
    return out
