"""The microVM jail's cgroup removal, tried again by tenacity while the cgroup is busy: plain
folders stand in for cgroups (a folder that holds a file cannot be removed, as a cgroup with
processes cannot)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from services.sandbox.runtime.microvm.jail import remove_cgroups


def test_empty_and_missing_cgroups_are_removed_at_once(tmp_path: Path) -> None:
    empty, missing = tmp_path / "empty", tmp_path / "missing"
    empty.mkdir()
    remove_cgroups([empty, missing], wait_s=30)
    assert not empty.exists()


def test_a_busy_cgroup_is_removed_once_it_empties(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "held").write_text("")
    emptied = threading.Timer(0.3, (busy / "held").unlink)
    emptied.start()
    try:
        remove_cgroups([busy], wait_s=60)
    finally:
        emptied.join()
    assert not busy.exists()


def test_a_cgroup_that_stays_busy_is_left_after_the_wait(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "held").write_text("")
    started = time.monotonic()
    remove_cgroups([busy], wait_s=0.2)
    assert busy.exists() and time.monotonic() - started >= 0.2
