"""The data plane's async side, shared by the k3stack routes and the envd endpoint: execs that
stop when their client goes away, streamed events, and streamed downloads.

Everything admits through :class:`~services.sandbox.api.guestcalls.GuestCalls` (slots per
sandbox and per key, streams on their own threads); a command whose consumer disappears
(disconnect, server shutdown) gets SIGKILL, so nothing runs for nobody.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from services.sandbox.lifecycle.errors import Conflict
from shared.auth import presented_key
from shared.contracts.sandbox import ExecBody, ExecOutput, ExecStreamEvent
from shared.errors import APIError

if TYPE_CHECKING:
    from services.sandbox.api.guestcalls import GuestCalls
    from services.sandbox.lifecycle.manager import SandboxManager

READ_AHEAD = 1024 * 1024
"""A download is read this far before its answer starts: a small file goes out whole (with
its length), and a file with no fixed size (``/dev/zero``, a growing log) past it is 413
instead of an endless or half-sent body."""


def caller_key(request: Request) -> str | None:
    """The client a deployed-mode call counts against: a digest of its API key. None in local
    mode (no key is checked there, and every SDK sends the same one): the sandbox is the client."""
    if request.app.state.settings.mode != "deployed":
        return None
    key = presented_key(request)
    return hashlib.sha256(key.encode()).hexdigest()[:16] if key else None


def exec_events(
    calls: GuestCalls, m: SandboxManager, sandbox_id: str, events: Iterator[ExecStreamEvent],
    key: str | None = None,
) -> AsyncIterator[ExecStreamEvent]:  # fmt: skip
    """A command's events, iterated without holding a slot; abandoned -> its process is killed."""
    pid: list[int] = []

    def kill() -> None:
        if pid:
            m.kill_process(sandbox_id, pid[0], 9)

    def track() -> Iterator[ExecStreamEvent]:
        for ev in events:
            if ev.kind == "start" and ev.pid:
                pid.append(ev.pid)
            yield ev

    return calls.stream(sandbox_id, track(), on_abandon=kill, key=key)


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body is read by then; nothing else arrives)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def run_exec(
    calls: GuestCalls, m: SandboxManager, sandbox_id: str, body: ExecBody, request: Request
) -> ExecOutput | Response:
    """A foreground exec that holds a slot while it runs and is killed if its client leaves
    (a background start is quick and runs as a plain call)."""
    key = caller_key(request)
    if body.background:
        return await calls.run(sandbox_id, m.exec, sandbox_id, body, key=key)
    started = time.perf_counter()
    with calls.slot(sandbox_id, key):
        raw = await anyio.to_thread.run_sync(m.exec_stream, sandbox_id, body, limiter=calls.limiter)
        events = exec_events(calls, m, sandbox_id, raw, key)
        out = ExecOutput(exit_code=None, stdout="", stderr="", timed_out=False, duration_ms=0)
        parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        gone, error = True, ""
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await _disconnected(request)
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            async for ev in events:
                if ev.kind in parts:
                    parts[ev.kind].append(ev.data)
                elif ev.kind == "start":
                    out.pid = ev.pid
                elif ev.kind == "exit":
                    out.exit_code, out.timed_out = ev.exit_code, ev.timed_out
                    out.truncated = ev.truncated
                elif ev.kind == "error":
                    error = ev.data
            gone = False
            tg.cancel_scope.cancel()
    if error:  # the sandbox went away mid-command
        raise Conflict("not_running", error)
    if gone:  # nobody reads this answer; the command was killed when its stream was abandoned
        return Response(status_code=499)
    out.stdout, out.stderr = "".join(parts["stdout"]), "".join(parts["stderr"])
    out.duration_ms = (time.perf_counter() - started) * 1000
    return out


async def read_response(
    calls: GuestCalls, m: SandboxManager, sandbox_id: str, path: str, request: Request
) -> Response:
    """A guest file as a streamed body, holding one slot of the sandbox until it is sent."""
    key = caller_key(request)
    cm = calls.slot(sandbox_id, key)
    cm.__enter__()
    try:
        info = await anyio.to_thread.run_sync(m.stat, sandbox_id, path, limiter=calls.limiter)
        limit = m.settings.max_upload_bytes
        if info.type == "file" and info.size > limit:
            raise APIError(413, "too_large", f"{info.path} is {info.size} bytes, over the "
                           f"limit of {limit} (K3STACK_SANDBOX__MAX_UPLOAD_BYTES)")  # fmt: skip
        raw = await anyio.to_thread.run_sync(
            m.read_file_stream, sandbox_id, path, limiter=calls.limiter
        )
        chunks = calls.stream(sandbox_id, raw, key=key)
        head: list[bytes] = []
        size = 0
        async for chunk in chunks:
            head.append(chunk)
            size += len(chunk)
            if size > READ_AHEAD:
                break
        else:
            cm.__exit__(None, None, None)
            return Response(b"".join(head), media_type="application/octet-stream")
        if info.size < size:  # no fixed size: a device or a file still growing
            await chunks.aclose()  # type: ignore[attr-defined]
            raise APIError(413, "too_large", f"{info.path} has no fixed size (a device or a "
                           f"growing file) and is longer than {READ_AHEAD} bytes")  # fmt: skip
    except BaseException:
        cm.__exit__(None, None, None)
        raise

    async def body() -> AsyncIterator[bytes]:
        try:
            for part in head:
                yield part
            head.clear()
            async for chunk in chunks:
                yield chunk
        finally:
            cm.__exit__(None, None, None)

    return StreamingResponse(body(), media_type="application/octet-stream")
