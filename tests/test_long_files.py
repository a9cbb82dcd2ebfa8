"""House rule for the whole repository: no Python file over 800 lines, with no exception.

A file that grows past the limit is split by resource or job (see the tools apps' ``actions``
packages, ``shared/jobs/``, ``shared/objectstore/``); a docstring saying why it must stay one
file no longer excuses it. The scan covers every folder of the repository, tests included,
and skips only what is not the project's source: hidden folders (``.venv``, ``.git``, caches)
and build outputs (``wheelhouse/``, ``build/``, ``dist/``)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 800
NOT_SOURCE = {"wheelhouse", "build", "dist", "var", "node_modules", "__pycache__"}


def python_files(root: Path) -> list[Path]:
    """Every ``*.py`` under ``root`` except in hidden folders and build outputs."""
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        if any(p.startswith(".") or p in NOT_SOURCE or p.endswith(".egg-info") for p in parts):
            continue
        out.append(path)
    return out


def long_files(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root).as_posix()} ({n} lines)"
        for path in python_files(root)
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    ]


def test_the_rule_catches_a_long_file_whatever_its_docstring_says(tmp_path: Path) -> None:
    body = "x = 1\n" * (MAX_LINES + 1)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text(body)
    (tmp_path / "why.py").write_text('"""Why one file: a parser."""\n' + body)
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "vendored.py").write_text(body)
    assert long_files(tmp_path) == [
        f"pkg/long.py ({MAX_LINES + 1} lines)",
        f"why.py ({MAX_LINES + 2} lines)",
    ]


def test_the_scan_reaches_every_source_folder() -> None:
    seen = {path.relative_to(ROOT).parts[0] for path in python_files(ROOT)}
    assert {"services", "shared", "bench", "scripts", "tests", "e2e"} <= seen


def test_no_python_file_in_the_repository_over_800_lines() -> None:
    long = long_files(ROOT)
    assert not long, f"over {MAX_LINES} lines (split it by resource or job): {long}"
