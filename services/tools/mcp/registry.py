"""The MCP tool registry: one :class:`Tool` per agent-facing operation, grouped by app.

A tool is a name (as the public MCP servers for the app spell it), a description, a pydantic
model for its arguments (its JSON schema is the ``inputSchema`` agents see) and a handler
``fn(ctx, args) -> JSON`` that calls the app's ``actions``. Tool modules register themselves
with :func:`tool` from each app's ``tools`` module; :func:`tools_for` imports them on first use
(no import-time side effects elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from services.tools.context import WorldContext


@dataclass(frozen=True)
class Tool:
    app: str
    name: str
    description: str
    args: type[BaseModel]
    handler: Callable[[WorldContext, Any], Any]
    read_only: bool

    def schema(self) -> dict[str, Any]:
        """The MCP ``Tool`` object for ``tools/list``."""
        input_schema = self.args.model_json_schema()
        input_schema.pop("title", None)
        input_schema.setdefault("properties", {})
        return {
            "name": self.name,
            "title": self.name,
            "description": self.description,
            "inputSchema": input_schema,
            "annotations": {
                "readOnlyHint": self.read_only,
                "destructiveHint": False,
                "openWorldHint": False,
            },
        }


_REGISTRY: dict[str, dict[str, Tool]] = {}


def tool(
    app: str, name: str, args: type[BaseModel], *, read_only: bool = False
) -> Callable[[Callable[[WorldContext, Any], Any]], Callable[[WorldContext, Any], Any]]:
    """Register ``fn`` as the MCP tool ``name`` of ``app``; its docstring is the description."""

    def register(fn: Callable[[WorldContext, Any], Any]) -> Callable[[WorldContext, Any], Any]:
        description = " ".join((fn.__doc__ or name).split())
        _REGISTRY.setdefault(app, {})[name] = Tool(app, name, description, args, fn, read_only)
        return fn

    return register


@cache
def _load(app: str) -> bool:
    """Import the app's ``tools`` module (``services/tools/apps/<app>/tools.py``)."""
    from services.tools.db import app_module

    return app_module(app, "tools") is not None


def tool_apps() -> tuple[str, ...]:
    """Every app that serves MCP tools, found by folder."""
    from services.tools.db import app_names

    return tuple(a for a in app_names() if _load(a))


def tools_for(apps: tuple[str, ...] | None = None) -> dict[str, Tool]:
    """Every tool of ``apps``, by name, in a stable order (app, then registration)."""
    out: dict[str, Tool] = {}
    for app in apps if apps is not None else tool_apps():
        if _load(app):
            out.update(_REGISTRY.get(app, {}))
    return out
