"""Retries go through tenacity (pinned), not hand-written loops, anywhere in the tree.

What the scan calls a hand-written retry loop (read from the syntax tree, one loop at a time,
not entering the functions, classes and loops nested in it):

- a loop that catches an exception without leaving (a handler that does not end in ``raise``,
  ``return`` or ``break``) and sleeps (calls anything named ``sleep``): it tries again after a
  wait; or
- a ``for`` loop whose target names an attempt, a retry or a try (``for attempt in range(3)``)
  and holds a ``try``: it tries again at once. A loop over ``tenacity.Retrying`` /
  ``AsyncRetrying`` is tenacity's own and passes.

What it does not call one, on purpose: a wait that polls progress (a loop that asks whether a
row is ready, a migration has completed or a process has gone, and sleeps between asks) catches
nothing, so it passes; a loop whose handler leaves it (``except OSError: break``) retries
nothing. A wait that must tolerate errors while it looks says so in a probe function of its own
("what one look sees"), which the loop then polls. A loop that re-asks a model with feedback
(``verifier/judges``) does not sleep and is not counted: it is a conversation, not a retry.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("services", "shared", "bench", "scripts")
RETRY_NAMES = re.compile(r"attempt|retr|tries", re.IGNORECASE)
LOOPS = (ast.While, ast.For, ast.AsyncFor)
NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, *LOOPS)
LEAVES = (ast.Raise, ast.Return, ast.Break)


def _own(loop: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``loop``'s own body (nested functions, classes and loops are their own)."""
    todo = [*ast.iter_child_nodes(loop)]
    while todo:
        node = todo.pop()
        if isinstance(node, NESTED):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _called(node: ast.AST) -> str:
    if not isinstance(node, ast.Call):
        return ""
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def retry_loops(source: str) -> list[int]:
    """Line numbers of the hand-written retry loops in ``source`` (see the module's docstring)."""
    found = []
    for loop in ast.walk(ast.parse(source)):
        if not isinstance(loop, LOOPS):
            continue
        own = list(_own(loop))
        handlers = [h for n in own if isinstance(n, ast.Try) for h in n.handlers]
        if not handlers:
            continue
        swallows = any(not isinstance(h.body[-1], LEAVES) for h in handlers)
        sleeps = any(_called(n) == "sleep" for n in own)
        counted = (
            not isinstance(loop, ast.While)
            and any(
                isinstance(n, ast.Name) and RETRY_NAMES.search(n.id) for n in ast.walk(loop.target)
            )
            and _called(loop.iter) not in ("Retrying", "AsyncRetrying")
        )
        if (swallows and sleeps) or counted:
            found.append(loop.lineno)
    return sorted(found)


HAND_WRITTEN = {
    "counted": (
        "for attempt in range(3):\n"
        "    try:\n"
        "        return fetch()\n"
        "    except OSError:\n"
        "        time.sleep(2**attempt)\n"
    ),
    "counted, no wait": (
        "for attempt in range(3):\n"
        "    try:\n"
        "        vm = take()\n"
        "        break\n"
        "    except FileNotFoundError:\n"
        "        if attempt == 2:\n"
        "            raise\n"
    ),
    "until a deadline": (
        "while True:\n"
        "    try:\n"
        "        sock.connect(path)\n"
        "        break\n"
        "    except OSError:\n"
        "        if time.monotonic() > deadline:\n"
        "            raise\n"
        "        time.sleep(0.005)\n"
    ),
    "health poll swallowing errors": (
        "async def ready():\n"
        "    while time.monotonic() < deadline:\n"
        "        try:\n"
        "            if (await client.get(url)).status_code == 200:\n"
        "                return True\n"
        "        except httpx.HTTPError:\n"
        "            pass\n"
        "        await asyncio.sleep(1)\n"
    ),
}
NOT_RETRIES = {
    "tenacity": (
        "for attempt in tenacity.Retrying(stop=tenacity.stop_after_attempt(3)):\n"
        "    with attempt:\n"
        "        try:\n"
        "            return fetch()\n"
        "        finally:\n"
        "            close()\n"
    ),
    "a plain loop": "for row in rows:\n    try:\n        handle(row)\n    except KeyError:\n        pass\n",
    "a progress poll": (
        "while True:\n"
        "    row = s.get(SetupRow, key)\n"
        "    if row.status == 'ready':\n"
        "        return row\n"
        "    time.sleep(0.2)\n"
    ),
    "a handler that leaves": (
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        "        pids = read_pids()\n"
        "    except OSError:\n"
        "        break\n"
        "    for pid in pids:\n"
        "        try:\n"
        "            os.kill(pid, 9)\n"
        "        except ProcessLookupError:\n"
        "            pass\n"
        "    time.sleep(0.02)\n"
    ),
    "a probe polled": (
        "def look():\n"
        "    try:\n"
        "        return client.get(url).status_code == 200\n"
        "    except httpx.HTTPError:\n"
        "        return False\n"
        "while not look():\n"
        "    time.sleep(0.3)\n"
    ),
}


def test_the_scan_finds_each_kind_of_hand_written_retry() -> None:
    for name, source in HAND_WRITTEN.items():
        assert retry_loops(source), name


def test_the_scan_passes_tenacity_plain_loops_and_progress_polls() -> None:
    for name, source in NOT_RETRIES.items():
        assert retry_loops(source) == [], name


def test_no_hand_written_retry_loop_in_the_tree() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{line}"
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in retry_loops(path.read_text())
    ]
    assert not found, f"hand-written retry loops (use tenacity): {found}"
