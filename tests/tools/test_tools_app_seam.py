"""The seam between the tools core and its apps is one typed declaration per app
(``services.tools.apps.base.ToolsApp``), not optional names probed on modules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.tools.apps.base import ToolsApp
from services.tools.db import app_names, tools_apps

TOOLS = Path(__file__).resolve().parents[2] / "services" / "tools"


def test_every_app_folder_declares_a_tools_app_named_after_it() -> None:
    apps = tools_apps()
    assert [a.name for a in apps] == list(app_names())
    for app in apps:
        assert isinstance(app, ToolsApp)
        assert app.routers, f"{app.name} mounts no routes"
        assert app.export_state is not None, f"{app.name} exports no state"
    slack = {a.name: a for a in apps}["slack"]
    assert slack.tick.__name__ == "deliver_due"  # scheduled messages go out as the clock moves


def test_an_app_without_a_declaration_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.tools.db as db

    monkeypatch.setattr(db, "app_module", lambda app, module: None)
    db.tools_apps.cache_clear()
    try:
        with pytest.raises(TypeError, match=r"apps/\w+/app.py must define APP = ToolsApp"):
            db.tools_apps()
    finally:
        db.tools_apps.cache_clear()


def test_the_core_never_probes_an_app_module_for_optional_names() -> None:
    """Outside ``apps/``, an app's modules are imported only to register (ops, npc, tools)
    or found through ``tools_apps()``; nothing asks a module whether it has a function."""
    probe = re.compile(r"\b(?:getattr|hasattr)\(\s*mod\b")
    offenders = []
    for path in TOOLS.rglob("*.py"):
        if "apps" in path.relative_to(TOOLS).parts:
            continue
        text = path.read_text()
        if probe.search(text) or re.search(r'app_module\([^)]*"(?:routes|state|actions)"', text):
            offenders.append(str(path.relative_to(TOOLS)))
    assert offenders == []
