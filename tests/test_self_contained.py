"""The project needs nothing outside its checkout.

A user's clone has no sibling folders, so a test, script or build file that reads ``../shared``
(the design folder beside the developers' checkout), an absolute path of the developers' machine,
or walks above the repository root passes here and fails for everyone else. This test reads every
tracked file that code runs from and fails on any such reference, naming file and line.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Files that are run, imported or read by the build: code, scripts, build and deploy files.
RUN_SUFFIXES = {".py", ".sh", ".toml", ".cfg", ".ini", ".yml", ".yaml", ".tpl", ".j2", ".c", ".mk"}
RUN_NAMES = {"Makefile", "Dockerfile", "run", ".dockerignore"}

ESCAPES = [
    (re.compile(r"\.\./shared\b"), "the design folder beside the checkout (../shared)"),
    (re.compile(r"(?<![\w.])/work/"), "an absolute path of the developers' machine (/work/...)"),
    (re.compile(r"\bREPO(?:_ROOT)?\.parent\b"), "a path above the repository root"),
    (re.compile(r"\.\.[/\\]\.\.[/\\]shared"), "a sibling folder of the checkout"),
]
PARENTS = re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]")


def _tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    files = []
    for raw in listed:
        if not raw:
            continue
        path = REPO / raw.decode()
        if path.suffix in RUN_SUFFIXES or path.name in RUN_NAMES:
            files.append(path)
    return files


def _violations(rel: Path, text: str) -> list[str]:
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for pattern, what in ESCAPES:
            if pattern.search(line):
                found.append(f"{rel}:{lineno}: {what}: {line.strip()}")
        for match in PARENTS.finditer(line):
            # parents[k] of a file k folders below the root is the root; more climbs out of it.
            if int(match.group(1)) >= len(rel.parts):
                found.append(f"{rel}:{lineno}: parents[{match.group(1)}] leaves the checkout")
    return found


def test_nothing_reaches_outside_the_checkout():
    files = [f for f in _tracked_files() if f != Path(__file__).resolve()]  # its own examples
    assert len(files) > 50, "git ls-files found almost nothing: is this a checkout?"
    problems = []
    for path in files:
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        problems += _violations(path.relative_to(REPO), text)
    assert problems == [], "files that depend on paths outside the repository:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ('SCHEMA = REPO_ROOT.parent / "shared" / "schemas" / "x.json"', True),
        ('open("../shared/REFERENCES.md")', True),
        ("cat /work/shared/DESIGN.md", True),
        ("ROOT = Path(__file__).resolve().parents[9]", True),
        ("ROOT = Path(__file__).resolve().parents[1]", False),
        ('validate_key("a/../../etc")', False),
    ],
)
def test_the_detector_itself(line, bad):
    """The patterns catch what they are for and leave path-traversal test inputs alone."""
    assert bool(_violations(Path("tests/deploy/test_probe.py"), line)) is bad
