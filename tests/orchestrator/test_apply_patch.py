"""Codex's apply_patch: every construct of its grammar, its lenient matching, and the tree a
rejected patch leaves (parse errors change nothing; a failing hunk keeps earlier hunks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.orchestrator.apply_patch import (
    LocalFS,
    ParseError,
    PatchError,
    apply_patch,
    parse_patch,
)

REPO = Path(__file__).resolve().parents[2]


def wrap(body: str) -> str:
    return f"*** Begin Patch\n{body}\n*** End Patch"


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_add_delete_update_move_and_summary(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("bye\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src/app.py").write_text("def f():\n    pass\n\nx = 1\n")
    (tmp_path / "mv.txt").write_text("a\nb\n")
    out = apply_patch(
        wrap(
            "*** Add File: new/deep/hello.txt\n+hello\n+world\n"
            "*** Delete File: old.txt\n"
            "*** Update File: src/app.py\n@@ def f():\n-    pass\n+    return 123\n"
            "*** Update File: mv.txt\n*** Move to: moved/mv2.txt\n@@\n a\n-b\n+B"
        ),
        LocalFS(tmp_path),
    )
    assert out == (
        "Success. Updated the following files:\nA new/deep/hello.txt\n"
        "M src/app.py\nM moved/mv2.txt\nD old.txt\n"
    )
    assert tree(tmp_path) == {
        "moved/mv2.txt": "a\nB\n",
        "new/deep/hello.txt": "hello\nworld\n",
        "src/app.py": "def f():\n    return 123\n\nx = 1\n",
    }


def test_several_chunks_in_order_and_context_lines(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("class A:\n    x = 1\n\nclass B:\n    x = 1\n    y = 2\n")
    apply_patch(
        wrap(
            "*** Update File: f.py\n@@ class A:\n-    x = 1\n+    x = 10\n"
            "@@ class B:\n     x = 1\n-    y = 2\n+    y = 20"
        ),
        LocalFS(tmp_path),
    )
    assert (tmp_path / "f.py").read_text() == (
        "class A:\n    x = 10\n\nclass B:\n    x = 1\n    y = 20\n"
    )


def test_end_of_file_anchors_at_the_end(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x\ny\nx\n")
    apply_patch(wrap("*** Update File: f\n@@\n-x\n+z\n*** End of File"), LocalFS(tmp_path))
    assert (tmp_path / "f").read_text() == "x\ny\nz\n"


def test_first_chunk_may_omit_the_marker_and_pure_additions_append(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("import foo")  # no trailing newline: one is added
    apply_patch(wrap("*** Update File: f\n import foo\n+bar"), LocalFS(tmp_path))
    assert (tmp_path / "f").read_text() == "import foo\nbar\n"
    apply_patch(wrap("*** Update File: f\n@@\n+baz"), LocalFS(tmp_path))
    assert (tmp_path / "f").read_text() == "import foo\nbar\nbaz\n"


def test_whitespace_padded_markers_and_heredoc_wrapper(tmp_path: Path) -> None:
    apply_patch("*** Begin Patch \n  *** Add File: a\n+1\n *** End Patch  ", LocalFS(tmp_path))
    apply_patch("<<'EOF'\n*** Begin Patch\n*** Add File: b\n+2\n*** End Patch\nEOF\n",
                LocalFS(tmp_path))  # fmt: skip
    assert tree(tmp_path) == {"a": "1\n", "b": "2\n"}


def test_lenient_matching_whitespace_and_unicode_punctuation(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a = 1   \n    b = \u201cquoted\u201d \u2014 dash\n")
    apply_patch(
        wrap('*** Update File: f\n@@\n-a = 1\n-b = "quoted" - dash\n+ok'), LocalFS(tmp_path)
    )
    assert (tmp_path / "f").read_text() == "ok\n"


def test_blank_lines_between_chunks_and_empty_context_lines(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a\n\nb\nc\n")
    apply_patch(wrap("*** Update File: f\n@@\n a\n\n-b\n+B\n\n@@\n-c\n+C"), LocalFS(tmp_path))
    assert (tmp_path / "f").read_text() == "a\n\nB\nC\n"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("bad", "The first line of the patch must be '*** Begin Patch'"),
        ("*** Begin Patch\nbad", "The last line of the patch must be '*** End Patch'"),
        (wrap("*** Update File: t.py"), "Update file hunk for path 't.py' is empty"),
        (wrap("*** Frobnicate File: x"), "is not a valid hunk header"),
        (wrap("*** Update File: t.py\n@@\n*** End of File"), "does not contain any lines"),
        (wrap("*** Update File: t.py\n@@\nxx"), "Unexpected line found in update hunk"),
    ],
)
def test_parse_errors_change_nothing(tmp_path: Path, patch: str, message: str) -> None:
    (tmp_path / "keep").write_text("k\n")
    with pytest.raises(ParseError) as err:
        apply_patch(patch, LocalFS(tmp_path))
    assert message in str(err.value)
    assert tree(tmp_path) == {"keep": "k\n"}


def test_empty_patch_is_no_files_modified(tmp_path: Path) -> None:
    assert parse_patch("*** Begin Patch\n*** End Patch") == []
    with pytest.raises(PatchError, match="No files were modified."):
        apply_patch("*** Begin Patch\n*** End Patch", LocalFS(tmp_path))


def test_a_failing_hunk_keeps_the_earlier_hunks_as_codex_does(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("one\n")
    (tmp_path / "g").write_text("two\n")
    patch = wrap(
        "*** Add File: added\n+a\n"
        "*** Update File: f\n@@\n-one\n+ONE\n"
        "*** Update File: g\n@@\n-missing\n+X\n"
        "*** Delete File: f"
    )
    with pytest.raises(PatchError, match="Failed to find expected lines in g:\nmissing"):
        apply_patch(patch, LocalFS(tmp_path))
    assert tree(tmp_path) == {"added": "a\n", "f": "ONE\n", "g": "two\n"}


def test_missing_files_and_missing_context(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="Failed to read file to update nope"):
        apply_patch(wrap("*** Update File: nope\n@@\n-a\n+b"), LocalFS(tmp_path))
    with pytest.raises(PatchError, match="Failed to delete file nope"):
        apply_patch(wrap("*** Delete File: nope"), LocalFS(tmp_path))
    (tmp_path / "f").write_text("a\n")
    with pytest.raises(PatchError, match="Failed to find context 'def g' in f"):
        apply_patch(wrap("*** Update File: f\n@@ def g\n-a\n+b"), LocalFS(tmp_path))
    assert (tmp_path / "f").read_text() == "a\n"


def test_add_overwrites_an_existing_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("old\n")
    apply_patch(wrap("*** Add File: f\n+new"), LocalFS(tmp_path))
    assert (tmp_path / "f").read_text() == "new\n"


def run_cli(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.orchestrator.apply_patch", *args],
        cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_cli_applies_in_the_current_directory(tmp_path: Path) -> None:
    done = run_cli(tmp_path, wrap("*** Add File: x/y.txt\n+hi"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Success. Updated the following files:\nA x/y.txt\n"
    assert (tmp_path / "x/y.txt").read_text() == "hi\n"
    piped = run_cli(tmp_path, stdin=wrap("*** Update File: x/y.txt\n@@\n-hi\n+ho"))
    assert piped.returncode == 0 and (tmp_path / "x/y.txt").read_text() == "ho\n"


def test_cli_errors_like_codex(tmp_path: Path) -> None:
    bad = run_cli(tmp_path, "not a patch")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        "Invalid patch: The first line of the patch must be '*** Begin Patch'"
    )
    hunk = run_cli(tmp_path, wrap("*** Update File: t.py"))
    assert hunk.stderr.strip() == (
        "Invalid patch hunk on line 2: Update file hunk for path 't.py' is empty"
    )
    assert run_cli(tmp_path, "a", "b").returncode == 2
    assert run_cli(tmp_path, stdin="").returncode == 2
    missing = run_cli(tmp_path, wrap("*** Delete File: gone"))
    assert missing.returncode == 1 and "Failed to delete file gone" in missing.stderr
