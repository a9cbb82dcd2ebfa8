"""Where the world-scoped tables come from: the core's and every app's, found by folder.

Every package under ``services/tools/apps/`` is an app, and :func:`load_apps` imports its
``models`` (so its tables join ``Base.metadata``) and, when asked, its other modules
(``routes``, ``state``, ``actions``). The base and the world-scoping rule live in
``services.tools.tables`` (re-exported here for the apps' models). An app's tables are
created by its own Alembic revisions, in ``apps/<app>/migrations/`` (branches off the core's
first revision); :func:`tools_database` puts every app's folder in the service's history.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table

from services.tools.tables import CORE_PREFIX, Base, WorldScoped

if TYPE_CHECKING:
    from services.tools.apps.base import ToolsApp

__all__ = [
    "CORE_PREFIX",
    "MIGRATIONS",
    "Base",
    "WorldScoped",
    "app_migration_dirs",
    "app_module",
    "app_names",
    "load_apps",
    "tools_apps",
    "tools_database",
]

MIGRATIONS = Path(__file__).parent / "migrations"  # the core's history (worlds, events, ...)


@cache
def app_names() -> tuple[str, ...]:
    """The app packages under ``services/tools/apps/``, sorted (each has a ``models`` module)."""
    import services.tools.apps as apps_pkg

    names = []
    for info in pkgutil.iter_modules(apps_pkg.__path__):
        if info.ispkg:
            names.append(info.name)
    return tuple(sorted(names))


def app_migration_dirs() -> list[Path]:
    """Each app's own revisions folder (``apps/<app>/migrations/``), found by folder."""
    out = []
    for app in app_names():
        spec = importlib.util.find_spec(f"services.tools.apps.{app}")
        for root in (spec.submodule_search_locations or []) if spec else []:
            folder = Path(root) / "migrations"
            if folder.is_dir():
                out.append(folder)
    return out


def tools_database(url: str) -> Any:
    """The tools service's database handle: the core's migrations plus every app's."""
    from shared.db import ServiceDatabase

    return ServiceDatabase("tools", url, MIGRATIONS, version_dirs=app_migration_dirs())


def app_module(app: str, module: str) -> ModuleType | None:
    """``services.tools.apps.<app>.<module>``, or None when the app has no such module."""
    name = f"services.tools.apps.{app}.{module}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


@cache
def load_apps() -> tuple[str, ...]:
    """Import every app's models so ``Base.metadata`` knows all world-scoped tables."""
    import services.tools.models  # noqa: F401 - the core tables

    for app in app_names():
        app_module(app, "models")
    return app_names()


@cache
def tools_apps() -> tuple[ToolsApp, ...]:
    """Every app's declaration (``APP`` in ``apps/<app>/app.py``), sorted by name: the one
    way the core reaches an app's routes, state, clock and statements."""
    from services.tools.apps.base import ToolsApp

    out = []
    for name in load_apps():
        mod = app_module(name, "app")
        declared = vars(mod).get("APP") if mod is not None else None
        if not isinstance(declared, ToolsApp) or declared.name != name:
            raise TypeError(
                f"services/tools/apps/{name}/app.py must define APP = ToolsApp(name={name!r}, ...)"
            )
        out.append(declared)
    return tuple(out)


_present: set[str] | None = None


def set_present_tables(names: set[str] | None) -> list[str]:
    """Tell the world machinery which tables the database really has (after migrating).

    An app whose models exist but whose migration has not landed yet is then left out of
    snapshots, forks and exports instead of failing every one of them; the names left out
    are returned so the service can log them.
    """
    global _present
    _present = set(names) if names is not None else None
    load_apps()
    return sorted(
        t.name for t in Base.metadata.sorted_tables if names is not None and t.name not in names
    )


def world_scoped_tables() -> list[Table]:
    """Every table with a ``world_id`` column, in dependency order."""
    load_apps()
    return [
        t
        for t in Base.metadata.sorted_tables
        if "world_id" in t.c and (_present is None or t.name in _present)
    ]


def app_tables() -> list[Table]:
    """World-scoped tables that belong to apps (what the agent can change)."""
    return [t for t in world_scoped_tables() if not t.name.startswith(CORE_PREFIX)]
