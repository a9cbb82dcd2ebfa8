"""Every import a service's code can reach is one its image installs, lazy ones included.

`make e2e`'s imports phase imports each module inside its image, but an import inside a
function runs only when that function does: the orchestrator's official ``mcp`` client was
imported at the first world tool call, and its image (the ``orchestrator`` extra) lacked the
package, so every deployed episode failed while every module imported. Here each ``import``
statement of a service's and of ``shared/``'s code (top level, in functions, in methods) is
matched to the distribution that provides it in this venv, and that distribution must be in
the closure of the core dependencies plus the service's extra — what its image installs.
Imports guarded by ``except ImportError`` and ``TYPE_CHECKING`` blocks are optional by design.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("model", "sandbox", "tools", "verifier", "orchestrator")
OURS = {"services", "shared", "__future__"}


@cache
def _closure(service: str) -> frozenset[str]:
    """The distributions an image of ``service`` installs: pyproject's core dependencies and
    the service's extra, with everything they require (markers evaluated, extras followed)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [
        Requirement(s)
        for s in [*project["dependencies"], *project["optional-dependencies"][service]]
    ]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installable here (a marker excluded it): nothing to follow
        for spec in requires:
            dep = Requirement(spec)
            wanted = [""] + sorted(req.extras)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(dep)
    return frozenset(seen)


@cache
def _providers() -> dict[str, list[str]]:
    return {
        m: [canonicalize_name(d) for d in ds] for m, ds in metadata.packages_distributions().items()
    }


def _optional(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside ``try: … except ImportError`` (or a broader handler) or ``if TYPE_CHECKING:``."""
    child, up = node, parents.get(node)
    while up is not None:
        if isinstance(up, ast.Try) and child in up.body:
            for h in up.handlers:
                names = [h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts)
                if h.type is None or any(
                    isinstance(n, ast.Name)
                    and n.id in ("ImportError", "ModuleNotFoundError", "Exception")
                    for n in names
                ):
                    return True
        if isinstance(up, ast.If) and "TYPE_CHECKING" in ast.unparse(up.test):
            return True
        child, up = up, parents.get(up)
    return False


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every required absolute import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods = [node.module]
        else:
            continue
        if not _optional(node, parents):
            out += [(node.lineno, m.split(".")[0]) for m in mods]
    return out


def missing(service: str) -> list[str]:
    allowed, providers = _closure(service), _providers()
    bad = []
    files = [*(ROOT / "services" / service).rglob("*.py"), *(ROOT / "shared").rglob("*.py")]
    for path in sorted(files):
        for line, mod in imports_of(path):
            if mod in OURS or mod in sys.stdlib_module_names:
                continue
            dists = providers.get(mod)
            if not dists:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {mod} (no installed distribution)")
            elif not allowed.intersection(dists):
                bad.append(
                    f"{path.relative_to(ROOT)}:{line}: {mod} ({', '.join(dists)}) is not in the {service} image"
                )
    return bad


@pytest.mark.parametrize("service", SERVICES)
def test_every_import_is_installed_in_the_services_image(service: str) -> None:
    assert missing(service) == []


def test_the_check_finds_a_lazy_import_the_image_lacks(tmp_path: Path) -> None:
    """The check itself: a function-level import of a package outside the extra is reported,
    the same import under ``except ImportError`` is not."""
    src = tmp_path / "m.py"
    src.write_text(
        "def f():\n    import mcp\n\n"
        "def g():\n    try:\n        import torch\n    except ImportError:\n        return None\n"
    )
    assert imports_of(src) == [(2, "mcp")]
    assert "mcp" in _providers() and not _closure("model").intersection(_providers()["mcp"])
