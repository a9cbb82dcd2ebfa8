"""The tools service's house rule: no import cycles among its modules (deferred imports
included). The 800-line rule is repository-wide: tests/test_long_files.py."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "services" / "tools"


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.Module, name: str, is_pkg: bool) -> set[str]:
    """Every import the module makes, deferred ones (inside functions) included: a cycle
    hidden in a function is still a cycle. Only ``if TYPE_CHECKING`` blocks are skipped."""
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    out: set[str] = set()
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    for sub in ast.walk(tree):
        if id(sub) in skipped:
            continue
        if isinstance(sub, ast.Import):
            out.update(a.name for a in sub.names)
        elif isinstance(sub, ast.ImportFrom):
            mod = sub.module or ""
            if sub.level:
                mod = ".".join(base[: len(base) - sub.level + 1] + ([mod] if mod else []))
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in sub.names)
    return {m for m in out if m.startswith("services.tools")}


def import_graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        deps = _imports(tree, name, path.name == "__init__.py")
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_the_tools_service() -> None:
    found = cycles(import_graph())
    assert not found, found
