"""Parts of the process runtime on their own: checkpoint trees of an overlay upper directory
(``fstree``) and the exec output pump (``execs``), without a sandbox; the end-to-end behaviour
is in ``test_api_process.py``."""

from __future__ import annotations

import os
import stat
import subprocess

from services.sandbox.runtime.process import ProcessRuntime
from services.sandbox.runtime.process.fstree import (
    _OPAQUE_XATTR,
    _entry,
    _upper_signature,
    _walk_upper,
)


def test_upper_dir_walk_and_entries_cover_every_kind(tmp_path):
    upper = tmp_path / "upper" / "root"
    (upper / "d" / "sub").mkdir(parents=True)
    (upper / "d" / "sub" / "f.txt").write_text("hello")
    os.setxattr(upper / "d", _OPAQUE_XATTR, b"y")
    os.symlink("d/sub/f.txt", upper / "link")
    os.mknod(upper / "gone", stat.S_IFCHR | 0o000, os.makedev(0, 0))  # an overlayfs whiteout
    os.mkfifo(upper / "pipe")
    walked = list(_walk_upper(upper))
    paths = [p for p, _ in walked]
    assert paths.index("d") < paths.index("d/sub") < paths.index("d/sub/f.txt")
    kinds = {p: _entry(upper, p, st) for p, st in walked}
    assert kinds["d"]["t"] == "d" and kinds["d"]["o"] == 1 and "o" not in kinds["d/sub"]
    assert kinds["d/sub/f.txt"]["t"] == "f" and kinds["d/sub/f.txt"]["s"] == 5
    assert kinds["link"] == {**kinds["link"], "t": "l", "l": "d/sub/f.txt"}
    assert kinds["gone"]["t"] == "w" and kinds["pipe"]["t"] == "p"
    before = _upper_signature(tmp_path)
    assert _upper_signature(tmp_path) == before
    (upper / "d" / "sub" / "f.txt").write_text("changed!")
    assert _upper_signature(tmp_path) != before


def _pump(tmp_path, script: str, timeout_s: float, cap: int):  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(
        ["/bin/sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    return list(ProcessRuntime(tmp_path)._pump(proc, timeout_s, cap))


def test_exec_pump_caps_output_and_marks_it(tmp_path):
    events = _pump(tmp_path, "head -c 5000 /dev/zero | tr '\\0' x; echo err >&2; exit 3", 60, 1000)
    out = "".join(e.data for e in events if e.kind == "stdout")
    assert out == "x" * 1000
    assert "".join(e.data for e in events if e.kind == "stderr") == "err\n"
    assert events[-1].kind == "exit" and events[-1].exit_code == 3 and events[-1].truncated


def test_exec_pump_kills_the_group_at_its_time_limit(tmp_path):
    events = _pump(tmp_path, "sleep 600 & echo started; wait", 1, 1 << 20)
    assert "".join(e.data for e in events if e.kind == "stdout") == "started\n"
    assert events[-1].kind == "exit" and events[-1].timed_out and events[-1].exit_code is None
