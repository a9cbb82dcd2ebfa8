"""The MCP tool registry: one :class:`Tool` per agent-facing operation, grouped by app.

A tool is a name (as the public MCP servers for the app spell it), a description, a pydantic
model for its arguments (its JSON schema is the ``inputSchema`` agents see) and a handler
``fn(ctx, args) -> JSON`` that calls the app's ``actions``. Each app's ``tools`` module
registers its tools; :func:`tools_for` imports them on first use (no import-time side effects
elsewhere).

The arguments model is a tool's one declaration. A tool that only passes its arguments on to
an action is :func:`forward`: the handler is derived from the model (renaming the fields whose
public names differ from the action's keywords) and checked against the action's signature
when it is registered, so a field the action does not take fails at import, not in an agent's
call. A tool with logic of its own is a function decorated with :func:`tool`.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from services.tools.context import WorldContext


@cache
def _input_schema(args: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema as an ``inputSchema`` (built once per model: tools/list is hot)."""
    schema = args.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)  # the model's docstring is the tool's description
    schema.setdefault("properties", {})
    return schema


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
        return {
            "name": self.name,
            "title": self.name,
            "description": self.description,
            "inputSchema": copy.deepcopy(_input_schema(self.args)),
            "annotations": {
                "readOnlyHint": self.read_only,
                "destructiveHint": False,
                "openWorldHint": False,
            },
        }


class NoArgs(BaseModel):
    """A tool without arguments."""


_REGISTRY: dict[str, dict[str, Tool]] = {}


def _register(
    app: str,
    name: str,
    args: type[BaseModel],
    handler: Callable[[WorldContext, Any], Any],
    read_only: bool,
    description: str | None,
) -> None:
    text = " ".join((description or name).split())
    _REGISTRY.setdefault(app, {})[name] = Tool(app, name, text, args, handler, read_only)


def tool(
    app: str, name: str, args: type[BaseModel], *, read_only: bool = False
) -> Callable[[Callable[[WorldContext, Any], Any]], Callable[[WorldContext, Any], Any]]:
    """Register ``fn`` as the MCP tool ``name`` of ``app``; its docstring is the description."""

    def register(fn: Callable[[WorldContext, Any], Any]) -> Callable[[WorldContext, Any], Any]:
        _register(app, name, args, fn, read_only, fn.__doc__)
        return fn

    return register


def forward(
    app: str,
    name: str,
    args: type[BaseModel],
    action: Callable[..., Any],
    *,
    read_only: bool = False,
    rename: Mapping[str, str] | None = None,
    only_set: bool = False,
    description: str | None = None,
    **fixed: Any,
) -> None:
    """Register the tool ``name`` as ``action(ctx, **arguments, **fixed)``.

    ``rename`` maps a field to the action's keyword where they differ; ``only_set`` passes only
    the fields the caller gave (for patch semantics, where the action tells "leave alone" from
    ``null``). The description is ``description`` or the model's docstring.
    """
    renames = dict(rename or {})
    params = inspect.signature(action).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    wanted = [renames.get(f, f) for f in args.model_fields] + list(fixed)
    missing = [k for k in wanted if k not in params]
    if missing and not takes_any:
        raise TypeError(f"tool {name}: {action.__qualname__}() takes no {', '.join(missing)}")

    def handler(ctx: WorldContext, a: BaseModel) -> Any:
        values = a.model_dump(exclude_unset=only_set)
        return action(ctx, **{renames.get(k, k): v for k, v in values.items()}, **fixed)

    _register(app, name, args, handler, read_only, description or args.__doc__)


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
