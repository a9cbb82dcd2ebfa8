"""The seam between the core and a mock app: what an app gives, declared once and typed.

Each app's ``app.py`` builds one :class:`ToolsApp` from its own modules (``APP = ToolsApp(...)``);
the core reads every app through :func:`services.tools.db.tools_apps`, so it never probes a
module for optional names. A capability an app leaves out keeps its default, which does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

if TYPE_CHECKING:
    from services.tools.context import WorldContext
    from services.tools.events.ops.say import Statement
    from services.tools.models import ActionRow

ErrorStyle = Callable[[int, str], JSONResponse]
"""An app's error body for ``(status, message)``: Slack's ``ok: false``, Google's ``error``, ..."""


def _nothing(ctx: WorldContext) -> None:
    return None


def _no_statements(ctx: WorldContext, actions: list[ActionRow]) -> list[Statement]:
    return []


def _no_addresses(ctx: WorldContext) -> set[str]:
    return set()


@dataclass(frozen=True)
class ToolsApp:
    """One mock app as the core sees it.

    - ``routers``: its HTTP routes, mounted under the per-world token;
    - ``error_response`` / ``error_model``: its own error body, for auth, validation and unknown
      routes under its paths, and that body's model for the OpenAPI document;
    - ``exception_handlers``: handlers for its own exception types;
    - ``export_state``: its part of ``GET /worlds/{id}/state`` (must not write);
    - ``ensure_setup``: its defaults, created with every world so no read has to;
    - ``tick``: runs whenever the world clock moves (Slack posts scheduled messages);
    - ``statements`` / ``agent_addresses``: what the agent said and as whom, for ``say.*``;
    - ``resolve_input``: the items a judge reads for a selector naming this app (None: the
      cross-app conversation reader answers).
    """

    name: str
    routers: Sequence[APIRouter] = ()
    error_response: ErrorStyle | None = None
    error_model: type[BaseModel] | None = None
    exception_handlers: Mapping[type[Exception], Callable[..., Any]] = field(default_factory=dict)
    export_state: Callable[[WorldContext], dict[str, Any]] | None = None
    ensure_setup: Callable[[WorldContext], None] = _nothing
    tick: Callable[[WorldContext], object] = _nothing
    statements: Callable[[WorldContext, list[ActionRow]], list[Statement]] = _no_statements
    agent_addresses: Callable[[WorldContext], set[str]] = _no_addresses
    resolve_input: Callable[[WorldContext, dict[str, Any]], list[dict[str, Any]]] | None = None
