"""Name → behaviour for effects and check predicates; apps add entries in their ``ops``.

An effect is ``fn(ctx, args, env) -> None`` (it changes the world through an app's
``actions``); a predicate is ``fn(ctx, args) -> Outcome`` (it only reads). Unknown names fail
loudly, listing the known ones.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from services.tools.context import WorldContext


@dataclass
class EffectEnv:
    """What an effect knows besides its args: which event runs it and what triggered it."""

    event_id: str
    trigger: dict[str, Any] | None = None  # the matched action's payload, for triggered events
    npc_model_url: str | None = None


@dataclass
class Outcome:
    passed: bool
    detail: dict[str, Any] = field(default_factory=dict)


Effect = Callable[[WorldContext, dict[str, Any], EffectEnv], None]
Predicate = Callable[[WorldContext, dict[str, Any]], Outcome]

EFFECTS: dict[str, Effect] = {}
PREDICATES: dict[str, Predicate] = {}


def effect(name: str) -> Callable[[Effect], Effect]:
    def register(fn: Effect) -> Effect:
        EFFECTS[name] = fn
        return fn

    return register


def predicate(name: str) -> Callable[[Predicate], Predicate]:
    def register(fn: Predicate) -> Predicate:
        PREDICATES[name] = fn
        return fn

    return register


@cache
def load_ops() -> None:
    """Import the core's ops (``services.tools.events.ops``) and every app's ``ops`` and
    ``npc`` modules (each registers its names), so an app brings its effects and checks in
    its own folder."""
    import services.tools.events.ops as ops
    from services.tools.db import app_module, load_apps

    for info in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{info.name}")
    for app in load_apps():
        for name in ("ops", "npc"):
            app_module(app, name)


def get_effect(name: str) -> Effect:
    load_ops()
    if name not in EFFECTS:
        raise KeyError(f"unknown effect {name!r}; known: {sorted(EFFECTS)}")
    return EFFECTS[name]


def get_predicate(name: str) -> Predicate:
    load_ops()
    if name not in PREDICATES:
        raise KeyError(f"unknown check kind {name!r}; known: {sorted(PREDICATES)}")
    return PREDICATES[name]


def lower_all(values: Any) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        return [values.lower()]
    return [str(v).lower() for v in values]
