"""Retries go through tenacity (pinned), not hand-written loops.

A hand-written retry loop is a ``for``/``while`` loop holding a ``try`` and naming a retry, an
attempt, a backoff or a sleep. The scan covers the folders whose loops have moved to tenacity
(``shared/jobs``: :meth:`shared.jobs.JobTask.retrying`); a folder joins ``CHECKED`` once its own
loops have moved, until the list is the whole tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = (
    "shared/jobs",
    "shared/objectstore",
    "services/orchestrator/tools",
    "services/tools/apps/slack/actions",
    "services/tools/apps/notion/actions",
    "services/tools/apps/calendar/actions",
    "services/tools/apps/gmail/actions",
)
RETRY_WORDS = re.compile(r"retr|attempt|backoff|sleep", re.IGNORECASE)


def retry_loops(source: str) -> list[int]:
    """Line numbers of loops that hold a ``try`` and name a retry, attempt, backoff or sleep."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.While | ast.For | ast.AsyncFor):
            continue
        inner = list(ast.walk(node))
        words = {n.id for n in inner if isinstance(n, ast.Name)}
        words |= {n.attr for n in inner if isinstance(n, ast.Attribute)}
        if any(isinstance(n, ast.Try) for n in inner) and any(RETRY_WORDS.search(w) for w in words):
            found.append(node.lineno)
    return found


def test_the_scan_finds_a_hand_written_retry_loop_and_passes_tenacity() -> None:
    hand_written = (
        "def get():\n"
        "    for attempt in range(3):\n"
        "        try:\n"
        "            return fetch()\n"
        "        except OSError:\n"
        "            time.sleep(2**attempt)\n"
    )
    with_tenacity = (
        "def get():\n"
        "    for attempt in tenacity.Retrying(stop=tenacity.stop_after_attempt(3)):\n"
        "        with attempt:\n"
        "            return fetch()\n"
    )
    plain_loop = (
        "for row in rows:\n    try:\n        handle(row)\n    except KeyError:\n        pass\n"
    )
    assert retry_loops(hand_written) == [2]
    assert retry_loops(with_tenacity) == []
    assert retry_loops(plain_loop) == []


def test_no_hand_written_retry_loop_in_the_checked_folders() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{line}"
        for folder in CHECKED
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in retry_loops(path.read_text())
    ]
    assert all((ROOT / folder).is_dir() for folder in CHECKED)
    assert not found, f"hand-written retry loops (use tenacity): {found}"
