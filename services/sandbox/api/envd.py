"""E2B's envd data plane, served by the sandbox service for every sandbox.

The stock ``e2b`` SDK sends commands and file operations to envd, a daemon inside each E2B
sandbox: Connect RPC services ``process.Process`` and ``filesystem.Filesystem`` plus an HTTP
``/files`` endpoint. Here one endpoint — the service itself — answers for all sandboxes: the SDK
names the sandbox in the ``E2b-Sandbox-Id`` header of every data-plane request, and the
requests become guest calls of that sandbox (through the same manager, bounds and guest-call
pool as the k3stack routes). Point the SDK at it with its documented self-hosting settings:
``E2B_API_URL`` (or ``api_url``) and ``E2B_SANDBOX_URL`` (or ``sandbox_url``) both set to the
service's URL.

The RPC plumbing (Connect protocol, envelopes, codecs) is the ``connectrpc`` server that the
SDK's generated modules ship; the message types are the SDK's own protobuf definitions.

Served: ``Process.Start`` (streamed start/stdout/stderr/end events, background commands),
``Process.List``, ``Process.SendSignal``; ``Filesystem.Stat/ListDir/MakeDir/Move/Remove``;
``GET/POST /files`` (download; multipart or octet-stream upload). Not served (the RPC answers
``unimplemented``): ``Process.Connect`` (re-attaching to a running command's stream), stdin
after start (``SendInput``/``StreamInput``/``CloseStdin``), PTYs and directory watches.
"""

from __future__ import annotations

import hmac
import stat as stat_mod
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_pb as fs_pb
from e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication
from e2b.envd.process import process_pb as pr_pb
from e2b.envd.process.process_connect import ProcessASGIApplication
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from protobuf import Oneof
from protobuf.wkt import Timestamp
from starlette.datastructures import Headers

from services.sandbox.api.dataplane import exec_events, read_response
from services.sandbox.api.errors import to_api_error
from services.sandbox.api.tokens import ACCESS_HEADER, access_token
from services.sandbox.lifecycle.errors import NotFound, SandboxError
from shared.contracts.sandbox import EntryInfo, ExecBody
from shared.errors import APIError

if TYPE_CHECKING:
    from connectrpc.request import RequestContext
    from starlette.types import ASGIApp, Receive, Scope, Send

    from services.sandbox.api.guestcalls import GuestCalls
    from services.sandbox.lifecycle.manager import SandboxManager

SANDBOX_HEADER = "e2b-sandbox-id"
BASH_OR_SH = 'if command -v bash >/dev/null 2>&1; then exec bash "$@"; else exec sh "$@"; fi'
"""The SDK runs every command as ``/bin/bash -l -c CMD``; the busybox image has only ``sh``."""

_CODES = {400: Code.INVALID_ARGUMENT, 404: Code.NOT_FOUND, 409: Code.FAILED_PRECONDITION,
          413: Code.RESOURCE_EXHAUSTED, 429: Code.RESOURCE_EXHAUSTED, 503: Code.UNAVAILABLE}  # fmt: skip


def check_access(settings: Any, headers: Any) -> str | None:
    """Why a data-plane request may not proceed (None: it may)."""
    if not settings.auth_enabled:
        return None
    sid = headers.get(SANDBOX_HEADER) or ""
    want = access_token(settings, sid)
    got = headers.get(ACCESS_HEADER) or ""
    if want is None or not hmac.compare_digest(want.encode(), got.encode()):
        return f"missing or wrong {ACCESS_HEADER} for sandbox {sid!r}"
    return None


def _rpc_error(exc: APIError | SandboxError) -> ConnectError:
    if isinstance(exc, SandboxError):
        exc = to_api_error(exc)
    code = _CODES.get(exc.status, Code.INTERNAL)
    if exc.error_code == "file_error" and exc.status == 409:
        code = Code.ALREADY_EXISTS if "exists" in exc.message.lower() else code
    return ConnectError(code, exc.message)


class _Backend:
    """What both services need: the manager and the guest-call pool of the app, per request."""

    def __init__(self, state: Any) -> None:
        self._state = state

    @property
    def manager(self) -> SandboxManager:
        return self._state.manager

    @property
    def calls(self) -> GuestCalls:
        return self._state.guest_calls

    @staticmethod
    def sandbox_of(ctx: RequestContext) -> str:
        sid = ctx.request_headers.get(SANDBOX_HEADER)
        if not sid:
            raise ConnectError(Code.INVALID_ARGUMENT, f"missing {SANDBOX_HEADER} header")
        return sid

    async def call(self, sid: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` in one of sandbox ``sid``'s guest-call slots."""
        try:
            return await self.calls.run(sid, fn, *args)
        except (APIError, SandboxError) as exc:
            raise _rpc_error(exc) from exc


def _unimplemented(what: str) -> ConnectError:
    return ConnectError(Code.UNIMPLEMENTED, f"{what} is not served by k3stack's envd endpoint")


class ProcessService(_Backend):
    """``process.Process``: commands through the manager's streamed exec."""

    def __init__(self, state: Any) -> None:
        super().__init__(state)
        self._running: dict[str, dict[int, pr_pb.ProcessConfig]] = {}
        self._lock = threading.Lock()

    async def start(self, request: pr_pb.StartRequest, ctx: RequestContext) -> AsyncIterator:
        sid = self.sandbox_of(ctx)
        cfg = request.process or pr_pb.ProcessConfig()
        if not cfg.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "process.cmd is empty")
        argv = [cfg.cmd, *cfg.args]
        if cfg.cmd in ("/bin/bash", "bash"):  # the SDK's shell; images without bash use sh
            argv = ["/bin/sh", "-c", BASH_OR_SH, "sh", *cfg.args]
        body = ExecBody(argv=argv, env=dict(cfg.envs or {}), cwd=cfg.cwd or None, timeout_s=0)
        events = await self.call(sid, self.manager.exec_stream, sid, body)
        try:  # a stream holds no slot: SDK background commands cannot fill the data plane
            stream = exec_events(self.calls, self.manager, sid, events)
        except APIError as exc:
            raise _rpc_error(exc) from exc
        pid = 0
        try:
            async for ev in stream:
                if ev.kind == "start":
                    pid = ev.pid or 0
                    with self._lock:
                        self._running.setdefault(sid, {})[pid] = cfg
                    event = Oneof("start", pr_pb.ProcessEvent.StartEvent(pid=pid))
                elif ev.kind in ("stdout", "stderr"):
                    data = pr_pb.ProcessEvent.DataEvent(output=Oneof(ev.kind, ev.data.encode()))
                    event = Oneof("data", data)
                elif ev.kind == "exit":
                    code = ev.exit_code if ev.exit_code is not None else -1
                    end = pr_pb.ProcessEvent.EndEvent(
                        exit_code=code, exited=not ev.timed_out,
                        status="timed out" if ev.timed_out else f"exit status {code}",
                        error="the command hit its time limit" if ev.timed_out else None,
                    )  # fmt: skip
                    event = Oneof("end", end)
                else:  # the sandbox went away mid-command
                    raise ConnectError(Code.UNAVAILABLE, ev.data)
                yield pr_pb.StartResponse(event=pr_pb.ProcessEvent(event=event))
        finally:
            with self._lock:
                self._running.get(sid, {}).pop(pid, None)

    async def list(self, request: pr_pb.ListRequest, ctx: RequestContext) -> pr_pb.ListResponse:
        sid = self.sandbox_of(ctx)
        try:  # 404 for an unknown sandbox
            await self.calls.control(self.manager.get, sid)
        except SandboxError as exc:
            raise _rpc_error(exc) from exc
        with self._lock:
            procs = dict(self._running.get(sid, {}))
        infos = [pr_pb.ProcessInfo(config=cfg, pid=pid) for pid, cfg in procs.items()]
        return pr_pb.ListResponse(processes=infos)

    async def send_signal(
        self, request: pr_pb.SendSignalRequest, ctx: RequestContext
    ) -> pr_pb.SendSignalResponse:
        sid = self.sandbox_of(ctx)
        sel = request.process.selector if request.process else None
        if sel is None or sel.field != "pid":
            raise ConnectError(Code.INVALID_ARGUMENT, "select the process by pid")
        signal = int(request.signal) or 15
        try:  # a control call: never waits for a slot
            await self.calls.control(self.manager.kill_process, sid, int(sel.value), signal)
        except SandboxError as exc:
            raise _rpc_error(exc) from exc
        return pr_pb.SendSignalResponse()

    def connect(self, request: Any, ctx: RequestContext) -> AsyncIterator:
        raise _unimplemented("Process.Connect (re-attaching to a running command)")

    async def update(self, request: Any, ctx: RequestContext) -> Any:
        raise _unimplemented("Process.Update (PTY)")

    async def stream_input(self, request: Any, ctx: RequestContext) -> Any:
        raise _unimplemented("Process.StreamInput (stdin after start)")

    async def send_input(self, request: Any, ctx: RequestContext) -> Any:
        raise _unimplemented("Process.SendInput (stdin after start)")

    async def close_stdin(self, request: Any, ctx: RequestContext) -> Any:
        raise _unimplemented("Process.CloseStdin")


def _entry(e: EntryInfo) -> fs_pb.EntryInfo:
    kind = {"file": fs_pb.FileType.FILE, "dir": fs_pb.FileType.DIRECTORY,
            "symlink": fs_pb.FileType.SYMLINK}[e.type]  # fmt: skip
    type_bit = {"file": stat_mod.S_IFREG, "dir": stat_mod.S_IFDIR, "symlink": stat_mod.S_IFLNK}
    ts = e.modified_time.timestamp()
    return fs_pb.EntryInfo(
        name=e.name, type=kind, path=e.path, size=e.size, mode=e.mode,
        permissions=stat_mod.filemode(type_bit[e.type] | e.mode), owner="root", group="root",
        modified_time=Timestamp(seconds=int(ts), nanos=int((ts % 1) * 1e9)),
        is_symlink=e.type == "symlink",
    )  # fmt: skip


class FilesystemService(_Backend):
    """``filesystem.Filesystem``: guest file metadata through the manager's file calls."""

    async def stat(self, request: fs_pb.StatRequest, ctx: RequestContext) -> fs_pb.StatResponse:
        sid = self.sandbox_of(ctx)
        info = await self.call(sid, self.manager.stat, sid, request.path)
        return fs_pb.StatResponse(entry=_entry(info))

    async def make_dir(
        self, request: fs_pb.MakeDirRequest, ctx: RequestContext
    ) -> fs_pb.MakeDirResponse:
        sid = self.sandbox_of(ctx)
        try:
            await self.calls.run(sid, self.manager.stat, sid, request.path)
        except NotFound:
            pass
        except (APIError, SandboxError) as exc:
            raise _rpc_error(exc) from exc
        else:
            raise ConnectError(Code.ALREADY_EXISTS, f"{request.path} already exists")
        info = await self.call(sid, self.manager.make_dir, sid, request.path)
        return fs_pb.MakeDirResponse(entry=_entry(info))

    async def list_dir(
        self, request: fs_pb.ListDirRequest, ctx: RequestContext
    ) -> fs_pb.ListDirResponse:
        sid = self.sandbox_of(ctx)
        depth = max(1, int(request.depth or 1))
        out: list[fs_pb.EntryInfo] = []
        level = [request.path]
        for _ in range(depth):
            nxt = []
            for path in level:
                for e in await self.call(sid, self.manager.list_dir, sid, path):
                    out.append(_entry(e))
                    if e.type == "dir":
                        nxt.append(e.path)
            level = nxt
        return fs_pb.ListDirResponse(entries=out)

    async def move(self, request: fs_pb.MoveRequest, ctx: RequestContext) -> fs_pb.MoveResponse:
        sid = self.sandbox_of(ctx)
        body = ExecBody(argv=["mv", "--", request.source, request.destination], timeout_s=60)
        res = await self.call(sid, self.manager.exec, sid, body)
        if res.exit_code != 0:
            code = Code.NOT_FOUND if "No such file" in res.stderr else Code.INVALID_ARGUMENT
            raise ConnectError(code, res.stderr.strip() or f"mv exited {res.exit_code}")
        info = await self.call(sid, self.manager.stat, sid, request.destination)
        return fs_pb.MoveResponse(entry=_entry(info))

    async def remove(
        self, request: fs_pb.RemoveRequest, ctx: RequestContext
    ) -> fs_pb.RemoveResponse:
        sid = self.sandbox_of(ctx)
        await self.call(sid, self.manager.remove, sid, request.path, True)
        return fs_pb.RemoveResponse()

    def watch_dir(self, request: Any, ctx: RequestContext) -> AsyncIterator:
        raise _unimplemented("Filesystem.WatchDir")

    async def create_watcher(self, request: Any, ctx: RequestContext) -> Any:
        raise _unimplemented("Filesystem.CreateWatcher")

    async def get_watcher_events(self, request: Any, ctx: RequestContext) -> Any:
        raise _unimplemented("Filesystem.GetWatcherEvents")

    async def remove_watcher(self, request: Any, ctx: RequestContext) -> Any:
        raise _unimplemented("Filesystem.RemoveWatcher")


class EnvdDispatch:
    """ASGI middleware: Connect RPC paths go to the envd services, the rest to the app."""

    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.state = state
        self.rpc = {
            "/process.Process/": ProcessASGIApplication(ProcessService(state)),
            "/filesystem.Filesystem/": FilesystemASGIApplication(FilesystemService(state)),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for prefix, rpc in self.rpc.items():
                if scope["path"].startswith(prefix):
                    headers = Headers(scope=scope)
                    denied = check_access(self.state.settings, headers)
                    if denied:
                        body = b'{"code":"unauthenticated","message":"' + denied.encode() + b'"}'
                        resp = Response(body, 401, media_type="application/json")
                        await resp(scope, receive, send)
                        return
                    await rpc(scope, receive, send)
                    return
        await self.app(scope, receive, send)


# ------------------------------------------------------------------ envd's HTTP /files

router = APIRouter(include_in_schema=False)


def _sandbox(request: Request) -> str:
    sid = request.headers.get(SANDBOX_HEADER)
    if not sid:
        raise APIError(400, "invalid_request", f"missing {SANDBOX_HEADER} header")
    denied = check_access(request.app.state.settings, request.headers)
    if denied:
        raise APIError(401, "unauthorized", denied)
    return sid


@router.get("/files")
async def envd_download(request: Request, path: str) -> Response:
    """envd's download: the file's bytes (404 / 413 as the k3stack file routes)."""
    state = request.app.state
    return await read_response(state.guest_calls, state.manager, _sandbox(request), path, request)


@router.post("/files")
async def envd_upload(request: Request, path: str | None = None) -> JSONResponse:
    """envd's upload: ``multipart/form-data`` (a ``file`` part per file; the part's filename
    or ``path`` names it) or a raw ``application/octet-stream`` body to ``path``. Answers
    envd's ``[{"name", "type", "path"}]``."""
    state = request.app.state
    sid = _sandbox(request)
    limit = state.manager.settings.max_upload_bytes
    files: list[tuple[str, bytes]] = []
    if request.headers.get("content-type", "").startswith("multipart/"):
        form = await request.form(max_part_size=limit)
        for _, part in form.multi_items():
            if not hasattr(part, "read"):
                continue
            target = path if path and len(form) == 1 else (part.filename or path)
            if not target:
                raise APIError(400, "invalid_request", "an uploaded part names no path")
            files.append((target, await part.read()))
    else:
        if not path:
            raise APIError(400, "invalid_request", "path is required")
        body = await request.body()
        if len(body) > limit:
            raise APIError(413, "too_large", f"upload is over the limit of {limit} bytes")
        files.append((path, body))
    out = []
    for target, data in files:
        info = await state.guest_calls.run(sid, state.manager.write_file, sid, target, data, 0o644)
        out.append({"name": info.name, "type": "file", "path": info.path})
    return JSONResponse(out)
