"""House rule for every service: no Python file over 800 lines unless its module docstring says
why it must be one file (the words "one file"), so a long file is a decision, not a drift."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 800


def long_files_without_a_reason(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "one file" not in doc.lower():
            out.append(path.relative_to(root).as_posix())
    return out


def test_the_rule_catches_a_long_file_and_accepts_a_reason(tmp_path: Path) -> None:
    body = "x = 1\n" * (MAX_LINES + 1)
    (tmp_path / "long.py").write_text(body)
    (tmp_path / "why.py").write_text('"""Why one file: a parser."""\n' + body)
    (tmp_path / "short.py").write_text("x = 1\n")
    assert long_files_without_a_reason(tmp_path) == ["long.py"]


def test_no_service_file_over_800_lines_without_saying_why() -> None:
    long = long_files_without_a_reason(ROOT / "services")
    assert not long, f"over {MAX_LINES} lines without saying why they are one file: {long}"
