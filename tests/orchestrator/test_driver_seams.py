"""The seams between the episode core and its drivers, read from the source and exercised:
the core imports no driver; no driver calls another object's private method; the drivers'
public methods are typed without ``Any``; the registry maps every stored driver name to its
driver and refuses an unknown one, which fails the episode naming it (never succeeds)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from services.orchestrator.drivers import DRIVERS
from services.orchestrator.episode.driver import EpisodeDriver, UnknownDriver
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.recorder import EpisodeRecorder
from services.orchestrator.episode.runner import EpisodeRunner, core_drivers
from services.orchestrator.episode.service import create_episode
from services.orchestrator.episode.whitebox import LoopDriver
from services.orchestrator.harness.config import load_harness
from services.orchestrator.installed.episode import InstalledDriver
from services.orchestrator.rollouts.sample import SampleDriver
from shared.contracts.orchestrator import EpisodeCreate

ORCH = Path(__file__).resolve().parents[2] / "services" / "orchestrator"
EXTENSIONS = ("services.orchestrator.installed", "services.orchestrator.rollouts")
DRIVER_MODULES = [
    ORCH / "episode" / "driver.py",
    ORCH / "episode" / "recorder.py",
    ORCH / "episode" / "runner.py",
    ORCH / "episode" / "whitebox.py",
    ORCH / "installed" / "episode.py",
    ORCH / "rollouts" / "sample.py",
    ORCH / "rollouts" / "tasks.py",
    ORCH / "drivers.py",
    ORCH / "tasks.py",
]
DRIVER_CLASSES = (LoopDriver, InstalledDriver, SampleDriver, EpisodeRecorder)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imported(tree: ast.Module) -> list[str]:
    """Every module an import names, at any depth (function-level imports included)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_the_episode_core_imports_no_driver() -> None:
    core = sorted((ORCH / "episode").glob("*.py"))
    assert len(core) > 8
    bad = [
        f"{path.name}: {name}"
        for path in core
        for name in _imported(_tree(path))
        if name.startswith(EXTENSIONS) or name == "services.orchestrator.drivers"
    ]
    assert not bad, bad


def test_the_scan_sees_an_import_of_an_extension() -> None:
    """The scan above would catch the import it forbids, inside a function too."""
    tree = ast.parse(
        "def f():\n    from services.orchestrator.installed.episode import InstalledDriver\n"
    )
    assert any(n.startswith(EXTENSIONS) for n in _imported(tree))


def _private_calls(tree: ast.Module) -> list[str]:
    """Calls of ``x._name(...)`` whose receiver is not ``self``/``cls``/``super()`` (another
    object's private method), and imports of another module's private names."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, receiver = node.func.attr, node.func.value
            if not attr.startswith("_") or (attr.startswith("__") and attr.endswith("__")):
                continue
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [
                f"line {node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_")
            ]
    return found


def test_no_driver_calls_another_objects_private_method() -> None:
    bad = {p.name: calls for p in DRIVER_MODULES if (calls := _private_calls(_tree(p)))}
    assert not bad, bad


def test_the_private_call_scan_sees_one() -> None:
    tree = ast.parse("runner._persist(state)\nself._emit(1)\nsuper().__init__()\n")
    assert _private_calls(tree) == ["line 1: runner._persist(...)"]
    assert _private_calls(ast.parse("from x.y import _aware\n"))


def _public_signatures(cls: type) -> dict[str, str]:
    """The annotations of ``cls``'s public methods (and ``__init__``), from its source."""
    path = Path(__import__(cls.__module__, fromlist=["_"]).__file__)
    node = next(
        n for n in ast.walk(_tree(path)) if isinstance(n, ast.ClassDef) and n.name == cls.__name__
    )
    out = {}
    for fn in node.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        if fn.name.startswith("_") and fn.name != "__init__":
            continue
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        notes = [ast.unparse(a.annotation) for a in args if a.annotation is not None]
        unannotated = [a.arg for a in args if a.annotation is None and a.arg not in ("self", "cls")]
        out[fn.name] = " ".join(
            [*notes, "->", ast.unparse(fn.returns) if fn.returns else "MISSING"]
            + [f"unannotated:{a}" for a in unannotated]
        )
    return out


@pytest.mark.parametrize("cls", DRIVER_CLASSES, ids=lambda c: c.__name__)
def test_driver_signatures_are_typed_without_any(cls: type) -> None:
    sigs = _public_signatures(cls)
    assert "__init__" in sigs
    bad = {
        name: sig
        for name, sig in sigs.items()
        if re.search(r"\bAny\b", sig) or "MISSING" in sig or "unannotated:" in sig
    }
    assert not bad, bad


@pytest.mark.parametrize("cls", [LoopDriver, InstalledDriver, SampleDriver])
def test_each_driver_has_the_protocols_methods(cls: type) -> None:
    wanted = [m for m in dir(EpisodeDriver) if not m.startswith("_")]
    assert set(wanted) == {"start", "tick", "pause", "finish", "close"}
    assert "name" in EpisodeDriver.__annotations__
    missing = [m for m in wanted if not callable(getattr(cls, m, None))]
    assert not missing and isinstance(cls.name, str)


def test_the_registry_maps_each_stored_name_to_its_driver(tmp_path: Path) -> None:
    assert DRIVERS.names() == ["installed", "loop", "sample"]
    for cls in (LoopDriver, InstalledDriver, SampleDriver):
        assert DRIVERS.get(cls.name) is cls
    assert DRIVERS.for_harness(load_harness("claude-code")) == "loop"
    assert DRIVERS.for_harness(load_harness("claude-code-cli")) == "installed"
    assert core_drivers().names() == ["loop"]  # the core knows its own driver only
    with pytest.raises(UnknownDriver, match="no episode driver 'warp'.*installed, loop, sample"):
        DRIVERS.get("warp")
    with pytest.raises(UnknownDriver, match="harness kind 'installed'"):
        core_drivers().for_harness(load_harness("claude-code-cli"))
    with pytest.raises(ValueError, match="registered already"):
        core_drivers().register("loop", LoopDriver)


BODY = {"task": {"instruction": "go"}, "harness": "claude-code", "budgets": {"max_steps": 1}}


def _local(tmp_path: Path) -> Any:
    from tests.orchestrator.test_trajectory_fields import local_services

    return local_services(tmp_path)


def test_an_unknown_stored_driver_fails_the_episode_naming_it(orch_db, tmp_path: Path) -> None:
    body = EpisodeCreate.model_validate(BODY)
    episode_id = create_episode(orch_db, body, lambda _id: None, driver="warp")
    EpisodeRunner(orch_db, _local(tmp_path), episode_id, drivers=DRIVERS).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        assert row.status == "failed" and row.error_code == "unknown_driver"
        assert "'warp'" in row.error_message


def test_a_row_stored_before_drivers_gets_its_harness_kinds_driver(orch_db, tmp_path: Path) -> None:
    from services.orchestrator.episode.policy import ScriptedPolicy, Turn

    body = EpisodeCreate.model_validate(BODY)
    episode_id = create_episode(orch_db, body, lambda _id: None)  # no driver: an old row
    with orch_db.session() as s:
        assert s.get(EpisodeRow, episode_id).driver is None
    policy = ScriptedPolicy(lambda view: Turn(content="Done."))
    EpisodeRunner(orch_db, _local(tmp_path), episode_id, policy).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        assert row.status == "succeeded", row.error_message
        assert row.driver == "loop"
