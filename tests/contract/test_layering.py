"""The house's arrows point one way: ``shared/`` imports nothing from ``services/``, and no service
imports another service's modules (they talk over HTTP through ``shared.clients`` or over named
Celery queues). Checked statically over every Python file, from the AST: ``import``, ``from …
import`` (absolute and relative) and ``importlib.import_module`` / ``__import__`` with a literal
or f-string name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVICES = sorted(p.name for p in (REPO / "services").iterdir() if (p / "__init__.py").exists())


def _module_of(path: Path, repo: Path) -> list[str]:
    parts = list(path.relative_to(repo).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(path: Path, repo: Path = REPO) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in ``path`` a static reading can resolve."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = _module_of(path, repo)
    package = module if path.name == "__init__.py" else module[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this file's package
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found += [(node.lineno, f"{mod}.{a.name}") for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            name = _literal_prefix(node.args[0])
            if name:
                found.append((node.lineno, name))
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _literal_prefix(arg: ast.expr) -> str | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)  # f"services.{x}.app" -> "services.", enough to judge
    return None


def violations(root: Path, rule, repo: Path = REPO) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for path in sorted(root.rglob("*.py")):
        for line, mod in imported_modules(path, repo):
            why = rule(path, mod)
            if why:
                out.append(f"{path.relative_to(repo)}:{line} imports {mod}: {why}")
    return out


def _shared_rule(path: Path, mod: str) -> str | None:
    if mod == "services" or mod.startswith("services."):
        return "shared/ must not import services/ (take a factory or a client instead)"
    return None


def _service_rule(service: str):  # type: ignore[no-untyped-def]
    def rule(path: Path, mod: str) -> str | None:
        parts = mod.split(".")
        if parts[0] == "services" and len(parts) > 1 and parts[1] and parts[1] != service:
            return f"{service} reaches into the {parts[1]} service (call it over HTTP)"
        return None

    return rule


def test_shared_imports_nothing_from_services():
    assert not violations(REPO / "shared", _shared_rule), "\n".join(
        violations(REPO / "shared", _shared_rule)
    )


@pytest.mark.parametrize("service", SERVICES)
def test_no_service_imports_another_services_internals(service):
    found = violations(REPO / "services" / service, _service_rule(service))
    assert not found, "\n".join(found)


def test_the_checker_sees_every_kind_of_import(tmp_path):
    """The rules catch what they claim to (on a throwaway tree laid out like the repo)."""
    pkg = tmp_path / "services" / "verifier"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text(
        "import services.sandbox.api\n"
        "from services.tools import worlds\n"
        "from ..model import arch\n"
        "from . import fine\n"
        "from services.verifier import also_fine\n"
        "import importlib\n"
        "importlib.import_module('services.orchestrator.app')\n"
        "name = 'x'\n"
        "__import__(f'services.model.{name}')\n"
    )
    found = violations(pkg, _service_rule("verifier"), tmp_path)
    assert [f.split(" imports ")[1].split(":")[0] for f in found] == [
        "services.sandbox.api",
        "services.tools",
        "services.tools.worlds",
        "services.model",
        "services.model.arch",
        "services.orchestrator.app",
        "services.model.",
    ]
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "x.py").write_text("import importlib\nimportlib.import_module(f'services.{n}.app')\n")
    assert len(violations(shared, _shared_rule, tmp_path)) == 1
