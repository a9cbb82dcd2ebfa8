"""Uploads checked at the door: file names, their clashes and encodings, and body sizes.

A kernel candidate or a web app arrives as ``relative path -> content`` in a JSON body; each
is later written to disk, in the request (kernel static checks) or in a worker (web). Anything
the file system would refuse there — a name over its limits, a name that is a file in one
entry and a folder in another, a lone surrogate that has no UTF-8 bytes — is refused here with
a 4xx naming the field and the entry, instead of a 500 or a job that fails a second later.

Sizes are refused before the body is parsed (:class:`BodyCap`): a declared ``Content-Length``
over a route's cap is answered 413 without reading a byte; a chunked body is read up to the cap
and refused the moment it passes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import PurePosixPath

from starlette.types import ASGIApp, Receive, Scope, Send

from shared.asgi_body import Cut, content_length, read_capped, replaying

MAX_COMPONENT_BYTES = 255  # one folder or file name (the file systems' limit)
MAX_PATH_BYTES = 1024  # a whole relative path


def check_names(field: str, names: Iterable[str], *, suffix: str | None = None) -> None:
    """Raise ValueError naming ``field[name]`` for the first name that cannot be written."""
    names = list(names)
    kind = f"relative {suffix} path" if suffix else "relative path"
    for name in names:
        where = f"{field}[{name if len(name) <= 80 else name[:60] + '…'!r}]"
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{where}: the name is not valid UTF-8 (a lone surrogate)") from None
        parts = name.split("/")
        if not name or "\x00" in name or name.startswith("/") or {"", ".", ".."} & set(parts):
            raise ValueError(
                f"{where}: give a {kind} without '..', '.', empty parts or a leading '/'"
            )
        if suffix and PurePosixPath(name).suffix != suffix:
            raise ValueError(f"{where}: give a {kind} (the name must end in {suffix})")
        longest = max(parts, key=lambda p: len(p.encode()))
        if len(longest.encode()) > MAX_COMPONENT_BYTES:
            raise ValueError(
                f"{where}: the part {longest[:40]!r}… is {len(longest.encode())} bytes "
                f"(at most {MAX_COMPONENT_BYTES} per folder or file name)"
            )
        if len(raw) > MAX_PATH_BYTES:
            raise ValueError(f"{where}: the path is {len(raw)} bytes (at most {MAX_PATH_BYTES})")
    taken = set(names)
    for name in names:
        parts = name.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            if folder in taken:
                raise ValueError(
                    f"{field}[{folder!r}]: a file of that name is also the folder of {name!r}"
                )


def check_text(field: str, files: dict[str, str], *, raw_bytes: bool = False) -> None:
    """Every text has UTF-8 bytes; ``raw_bytes`` admits the surrogateescape form of raw bytes
    (U+DC80..U+DCFF), which the web writer turns back into the bytes they stand for."""
    errors = "surrogateescape" if raw_bytes else "strict"
    for name, text in files.items():
        try:
            text.encode("utf-8", errors)
        except UnicodeEncodeError as exc:
            bad = text[exc.start]
            raise ValueError(
                f"{field}[{name!r}]: character {exc.start} is a lone surrogate "
                f"(U+{ord(bad):04X}) that has no UTF-8 bytes"
                + ("; send raw bytes in binary_files (base64)" if raw_bytes else "")
            ) from None


class BodyCap:
    """ASGI middleware: 413 naming the field for a body over its route's cap, read no further.

    ``caps`` maps a path to ``(bytes, what)``; ``what`` names the field the cap stands for.
    Other POST/PUT bodies get ``default``."""

    def __init__(
        self, app: ASGIApp, caps: dict[str, tuple[int, str]], default: tuple[int, str]
    ) -> None:
        self.app, self.caps, self.default = app, caps, default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        cap, what = self.caps.get(scope["path"], self.default)
        declared = content_length(scope)
        if declared is not None and declared > cap:
            await _refuse(send, cap, what, declared)
            return
        body = await read_capped(receive, cap)
        if body is Cut.TOO_LARGE:
            await _refuse(send, cap, what, None)
        elif body is not Cut.GONE:
            await self.app(scope, replaying(body, receive), send)


async def _refuse(send: Send, cap: int, what: str, declared: int | None) -> None:
    size = f"{declared} bytes" if declared is not None else "over the cap"
    message = f"{what}: the request body is {size} (at most {cap} bytes here)"
    body = json.dumps({"code": 413, "error_code": "too_large", "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]  # fmt: skip
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
