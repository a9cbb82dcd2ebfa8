"""Claude Code's and Hermes's file tools share their executors (``FileRead``, ``FileWrite``,
``FileEdit`` in ``tools/builtin/core.py``) yet keep their own argument names and answers."""

from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.tools.builtin import CATALOGUE
from services.orchestrator.tools.builtin.core import ToolContext


class Files:
    """A sandbox that only keeps files."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        return self.files[path].encode()

    def write_file(self, sandbox_id: str, path: str, text: str) -> None:
        self.files[path] = text


def _call(key: str, args: dict[str, Any], ctx: ToolContext) -> str:
    tool = CATALOGUE[key]
    return tool.run(ctx, tool.args_model.model_validate(args))


@pytest.mark.parametrize(
    ("read", "write", "edit", "path", "written"),
    [
        ("Read", "Write", "Edit", "file_path", "File created successfully at: a.txt"),
        ("read_file", "write_file", "patch", "path", '{"success": true, "path": "a.txt"}'),
    ],
)
def test_write_edit_read(read: str, write: str, edit: str, path: str, written: str) -> None:
    files = Files()
    ctx = ToolContext(sandbox=files, sandbox_id="sb")
    assert _call(write, {path: "a.txt", "content": "one\ntwo\ntwo\n"}, ctx) == written
    edited = _call(edit, {path: "a.txt", "old_string": "two", "new_string": "2",
                          "replace_all": True}, ctx)  # fmt: skip
    assert edited == "The file a.txt has been updated (2 replacement)."
    assert _call(read, {path: "a.txt", "offset": 2, "limit": 1}, ctx) == "     2\t2"
    assert files.files == {"/root/a.txt": "one\n2\n2\n"}
    other = "path" if path == "file_path" else "file_path"
    with pytest.raises(ValueError, match=other):  # each harness its own argument name
        _call(read, {other: "a.txt"}, ctx)
