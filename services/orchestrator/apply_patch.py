"""Codex's ``apply_patch``: its patch grammar, its matching rules and its effects on a tree.

Grammar (``*** Begin Patch`` ... ``*** End Patch``; markers may carry surrounding whitespace;
a ``<<'EOF'`` heredoc wrapper is tolerated as Codex's lenient mode does)::

    *** Add File: PATH        then lines "+text"
    *** Delete File: PATH
    *** Update File: PATH     optional "*** Move to: PATH", then chunks:
        "@@" or "@@ CONTEXT"  then lines " ctx", "-old", "+new" (an empty line = empty context),
        optionally closed by "*** End of File" (the old lines must end the file)

Semantics follow Codex: the whole patch is parsed first (a parse error changes nothing); hunks
are then applied in order, each file written as soon as its hunk succeeds, so a hunk that fails
(missing file, context not found) leaves the earlier hunks applied and stops there. Old lines
are found with decreasing strictness (exact, trailing whitespace ignored, both ends trimmed,
Unicode punctuation folded to ASCII). Updated files end with a newline. Output on success is
``Success. Updated the following files:`` then ``A``/``M``/``D`` lines.

The file system is a parameter, so the same code edits a sandbox (through the sandbox API) and
a local directory (the CLI: ``python -m services.orchestrator.apply_patch 'PATCH'`` or the
patch on stdin, in the current directory).
"""

from __future__ import annotations

import posixpath
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
EOF_MARK = "*** End of File"


class PatchError(Exception):
    """A patch that does not parse, or a hunk that cannot be applied."""


class ParseError(PatchError):
    pass


@dataclass
class Chunk:
    context: str | None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    end_of_file: bool = False


@dataclass
class Hunk:
    kind: str  # "add" | "delete" | "update"
    path: str
    contents: str = ""
    move_to: str | None = None
    chunks: list[Chunk] = field(default_factory=list)


# --- parsing ------------------------------------------------------------------------------


def _boundaries(lines: list[str]) -> list[str]:
    first = lines[0].strip() if lines else None
    last = lines[-1].strip() if lines else None
    if first == BEGIN and last == END and len(lines) >= 2:
        return lines[1:-1]
    if first != BEGIN:
        raise ParseError("invalid patch: The first line of the patch must be '*** Begin Patch'")
    raise ParseError("invalid patch: The last line of the patch must be '*** End Patch'")


def _strip_heredoc(lines: list[str]) -> list[str]:
    try:
        return _boundaries(lines)
    except ParseError as first_error:
        if (
            len(lines) >= 4
            and lines[0] in ("<<EOF", "<<'EOF'", '<<"EOF"')
            and lines[-1].endswith("EOF")
        ):
            return _boundaries(lines[1:-1])
        raise first_error from None


def _hunk_error(line_number: int, message: str) -> ParseError:
    return ParseError(f"invalid hunk at line {line_number}, {message}")


def _parse_chunk(lines: list[str], line_number: int, first: bool) -> tuple[Chunk, int]:
    if lines[0] == "@@":
        context, start = None, 1
    elif lines[0].startswith("@@ "):
        context, start = lines[0][3:], 1
    elif first:
        context, start = None, 0
    else:
        raise _hunk_error(
            line_number,
            f"Expected update hunk to start with a @@ context marker, got: '{lines[0]}'",
        )
    if start >= len(lines):
        raise _hunk_error(line_number + 1, "Update hunk does not contain any lines")
    chunk = Chunk(context)
    parsed = 0
    for line in lines[start:]:
        if line == EOF_MARK:
            if parsed == 0:
                raise _hunk_error(line_number + 1, "Update hunk does not contain any lines")
            chunk.end_of_file = True
            parsed += 1
            break
        if line == "":
            chunk.old.append("")
            chunk.new.append("")
        elif line[0] == " ":
            chunk.old.append(line[1:])
            chunk.new.append(line[1:])
        elif line[0] == "+":
            chunk.new.append(line[1:])
        elif line[0] == "-":
            chunk.old.append(line[1:])
        else:
            if parsed == 0:
                raise _hunk_error(
                    line_number + 1,
                    f"Unexpected line found in update hunk: '{line}'. Every line should start "
                    "with ' ' (context line), '+' (added line), or '-' (removed line)",
                )
            break
        parsed += 1
    return chunk, parsed + start


def _parse_hunk(lines: list[str], line_number: int) -> tuple[Hunk, int]:
    head = lines[0].strip()
    if head.startswith(ADD):
        body = []
        for line in lines[1:]:
            if not line.startswith("+"):
                break
            body.append(line[1:] + "\n")
        return Hunk("add", head[len(ADD) :], contents="".join(body)), 1 + len(body)
    if head.startswith(DELETE):
        return Hunk("delete", head[len(DELETE) :]), 1
    if head.startswith(UPDATE):
        path = head[len(UPDATE) :]
        rest, used = lines[1:], 1
        move_to = None
        if rest and rest[0].startswith(MOVE):
            move_to = rest[0][len(MOVE) :]
            rest, used = rest[1:], used + 1
        chunks: list[Chunk] = []
        while rest:
            if not rest[0].strip():
                rest, used = rest[1:], used + 1
                continue
            if rest[0].startswith("*"):
                break
            chunk, n = _parse_chunk(rest, line_number + used, not chunks)
            chunks.append(chunk)
            rest, used = rest[n:], used + n
        if not chunks:
            raise _hunk_error(line_number, f"Update file hunk for path '{path}' is empty")
        return Hunk("update", path, move_to=move_to, chunks=chunks), used
    raise _hunk_error(
        line_number,
        f"'{head}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', "
        "'*** Delete File: {path}', '*** Update File: {path}'",
    )


def parse_patch(text: str) -> list[Hunk]:
    """The hunks of a patch, or :class:`ParseError` with Codex's message."""
    body = _strip_heredoc([line.removesuffix("\r") for line in text.strip().split("\n")])
    hunks: list[Hunk] = []
    line_number = 2
    while body:
        hunk, n = _parse_hunk(body, line_number)
        hunks.append(hunk)
        line_number += n
        body = body[n:]
    return hunks


# --- matching -----------------------------------------------------------------------------

_FOLD = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000", " "
        ),
    }
)


def seek(lines: list[str], pattern: list[str], start: int, eof: bool) -> int | None:
    """Where ``pattern`` starts in ``lines`` at or after ``start`` (at the end first if
    ``eof``), trying exact, rstrip, strip, then punctuation-folded comparison."""
    if not pattern:
        return start
    if len(pattern) > len(lines):
        return None
    begin = len(lines) - len(pattern) if eof else start
    last = len(lines) - len(pattern)
    for norm in (
        lambda s: s,
        str.rstrip,
        str.strip,
        lambda s: s.strip().translate(_FOLD),
    ):
        want = [norm(p) for p in pattern]
        for i in range(begin, last + 1):
            if [norm(x) for x in lines[i : i + len(pattern)]] == want:
                return i
    return None


def _split_lines(contents: str) -> list[str]:
    lines = contents.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def updated_contents(original: str, path: str, chunks: list[Chunk]) -> str:
    lines = _split_lines(original)
    replacements: list[tuple[int, int, list[str]]] = []
    index = 0
    for chunk in chunks:
        if chunk.context is not None:
            found = seek(lines, [chunk.context], index, False)
            if found is None:
                raise PatchError(f"Failed to find context '{chunk.context}' in {path}")
            index = found + 1
        if not chunk.old:
            at = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
            replacements.append((at, 0, list(chunk.new)))
            continue
        pattern, new = chunk.old, chunk.new
        found = seek(lines, pattern, index, chunk.end_of_file)
        if found is None and pattern[-1] == "":
            pattern = pattern[:-1]
            if new and new[-1] == "":
                new = new[:-1]
            found = seek(lines, pattern, index, chunk.end_of_file)
        if found is None:
            raise PatchError(f"Failed to find expected lines in {path}:\n" + "\n".join(chunk.old))
        replacements.append((found, len(pattern), list(new)))
        index = found + len(pattern)
    replacements.sort(key=lambda r: r[0])
    for start, old_len, new in reversed(replacements):
        del lines[start : start + old_len]
        lines[start:start] = new
    if not lines or lines[-1] != "":
        lines.append("")
    return "\n".join(lines)


# --- applying -----------------------------------------------------------------------------


class FileSystem(Protocol):
    def read_text(self, path: str) -> str: ...
    def write_text(self, path: str, text: str) -> None: ...  # creates parent directories
    def remove(self, path: str) -> None: ...


class LocalFS:
    """The local file system, relative paths resolved against ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _p(self, path: str) -> Path:
        return self.root / path

    def read_text(self, path: str) -> str:
        return self._p(path).read_text()

    def write_text(self, path: str, text: str) -> None:
        target = self._p(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def remove(self, path: str) -> None:
        target = self._p(path)
        if not target.is_file():
            raise FileNotFoundError(f"{path}: not a file")
        target.unlink()


@dataclass
class Applied:
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def summary(self) -> str:
        out = ["Success. Updated the following files:"]
        out += [f"A {p}" for p in self.added]
        out += [f"M {p}" for p in self.modified]
        out += [f"D {p}" for p in self.deleted]
        return "\n".join(out) + "\n"


def resolve(path: str, cwd: str) -> str:
    return path if posixpath.isabs(path) else posixpath.join(cwd, path)


def apply_hunks(hunks: list[Hunk], fs: FileSystem, cwd: str = "") -> Applied:
    """Apply in order; the first failing hunk raises :class:`PatchError` (earlier ones stay)."""
    if not hunks:
        raise PatchError("No files were modified.")
    done = Applied()
    for hunk in hunks:
        path = resolve(hunk.path, cwd) if cwd else hunk.path
        if hunk.kind == "add":
            try:
                fs.write_text(path, hunk.contents)
            except OSError as exc:
                raise PatchError(f"Failed to write file {path}: {exc}") from None
            done.added.append(path)
        elif hunk.kind == "delete":
            try:
                fs.remove(path)
            except OSError as exc:
                raise PatchError(f"Failed to delete file {path}: {exc}") from None
            done.deleted.append(path)
        else:
            try:
                original = fs.read_text(path)
            except OSError as exc:
                raise PatchError(f"Failed to read file to update {path}: {exc}") from None
            new = updated_contents(original, path, hunk.chunks)
            if hunk.move_to:
                dest = resolve(hunk.move_to, cwd) if cwd else hunk.move_to
                try:
                    fs.write_text(dest, new)
                except OSError as exc:
                    raise PatchError(f"Failed to write file {dest}: {exc}") from None
                try:
                    fs.remove(path)
                except OSError as exc:
                    raise PatchError(f"Failed to remove original {path}: {exc}") from None
                done.modified.append(dest)
            else:
                try:
                    fs.write_text(path, new)
                except OSError as exc:
                    raise PatchError(f"Failed to write file {path}: {exc}") from None
                done.modified.append(path)
    return done


def apply_patch(text: str, fs: FileSystem, cwd: str = "") -> str:
    """Parse and apply; returns Codex's success summary or raises :class:`PatchError`."""
    return apply_hunks(parse_patch(text), fs, cwd).summary()


def describe_parse_error(exc: ParseError) -> str:
    """The line Codex's binary prints on stderr for a patch that does not parse."""
    msg = str(exc)
    if msg.startswith("invalid patch: "):
        return "Invalid patch: " + msg[len("invalid patch: ") :]
    if msg.startswith("invalid hunk at line "):
        rest = msg[len("invalid hunk at line ") :]
        number, _, message = rest.partition(", ")
        return f"Invalid patch hunk on line {number}: {message}"
    return msg


def main(argv: list[str] | None = None) -> int:
    """``apply_patch 'PATCH'`` or ``apply_patch < patch``, in the current directory."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print("Error: apply_patch accepts exactly one PATCH argument.", file=sys.stderr)
        return 2
    if args:
        text = args[0]
    else:
        text = sys.stdin.read()
        if not text:
            print("Usage: apply_patch 'PATCH'\n       echo 'PATCH' | apply_patch", file=sys.stderr)
            return 2
    try:
        hunks = parse_patch(text)
    except ParseError as exc:
        print(describe_parse_error(exc), file=sys.stderr)
        return 1
    try:
        out = apply_hunks(hunks, LocalFS(Path.cwd()))
    except PatchError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    sys.stdout.write(out.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
