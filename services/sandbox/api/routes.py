"""HTTP routes of the sandbox service: thin adapters over :class:`SandboxManager`.

Lifecycle routes follow E2B's control plane (paths, verbs, status codes: create 201, kill 204,
pause 204, resume 201, connect 200/201, fork 201 with per-child results); the rest is
k3stack's (exec, files, checkpoints, restore, runtimes). Every failure is the shared ``Error``
body. Routes are plain ``def``: FastAPI runs them in its thread pool, and the manager
serialises what must be serialised per sandbox.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio.from_thread
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from services.sandbox.api.dataplane import caller_key, exec_events, read_response, run_exec
from services.sandbox.api.errors import to_error
from services.sandbox.api.guestcalls import GuestCalls
from services.sandbox.api.schemas import (
    Checkpoint,
    ConnectSandbox,
    EntryInfo,
    ExecBody,
    ExecOutput,
    ExecStreamEvent,
    GCReport,
    NewCheckpoint,
    NewSandbox,
    NewSandboxV2,
    NewTemplate,
    PortForward,
    RestoreRequest,
    ResumedSandbox,
    RuntimeInfo,
    Sandbox,
    SandboxDetail,
    SandboxForkRequest,
    SandboxForkResult,
    SandboxMetric,
    SandboxRefreshRequest,
    SandboxTimeoutRequest,
    SignalRequest,
    Template,
)
from services.sandbox.api.tokens import access_token, traffic_token
from services.sandbox.lifecycle.errors import SandboxError
from services.sandbox.lifecycle.manager import SandboxManager
from shared import sse as sse_wire
from shared.errors import APIError, Error

router = APIRouter()

_E = {"model": Error}
ERRORS_404 = {404: {**_E, "description": "No such sandbox"}}
ERRORS_409 = {
    404: {**_E, "description": "No such sandbox"},
    409: {**_E, "description": "Not possible in the sandbox's state or runtime"},
}
ERRORS_FILES = {
    **ERRORS_409,
    400: {**_E, "description": "Bad request or a path escaping the guest root"},
    429: {**_E, "description": "Too many exec/file calls in flight (guest_call_limit)"},
}


def get_manager(request: Request) -> SandboxManager:
    return request.app.state.manager


def get_guest_calls(request: Request) -> GuestCalls:
    return request.app.state.guest_calls


def _tokened(request: Request, sandbox: Sandbox) -> Sandbox:
    """The sandbox with its envd and traffic access tokens (set when auth is on)."""
    settings = request.app.state.settings
    sandbox.envdAccessToken = access_token(settings, sandbox.sandboxID)
    sandbox.trafficAccessToken = traffic_token(settings, sandbox.sandboxID)
    sandbox.domain = settings.sandbox.host_domain  # get_host(port): <port>-<id>.<domain>
    return sandbox


Manager = Annotated[SandboxManager, Depends(get_manager)]
Calls = Annotated[GuestCalls, Depends(get_guest_calls)]
PathQuery = Annotated[str, Query(description="Guest path; relative paths are under /home/user.")]


# ------------------------------------------------------------------ runtimes


@router.get("/runtimes", response_model=list[RuntimeInfo], operation_id="listRuntimes",
            tags=["runtimes"])  # fmt: skip
def list_runtimes(m: Manager) -> list[RuntimeInfo]:
    """Runtimes this host offers, what their checkpoints cover, and why missing ones are missing."""
    return m.runtime_infos()


# ------------------------------------------------------------------ sandboxes


@router.post("/sandboxes", response_model=Sandbox, status_code=201, operation_id="createSandbox",
             tags=["sandboxes"], responses={**ERRORS_409, 503: {**_E, "description": "Runtime unavailable"}})  # fmt: skip
def create_sandbox(body: NewSandbox, m: Manager, request: Request) -> Sandbox:
    """Boot a sandbox from a template; returns once its guest agent answers."""
    return _tokened(request, m.create(body))


@router.post("/v2/sandboxes", response_model=Sandbox, status_code=201,
             operation_id="createSandboxV2", tags=["sandboxes"],
             responses={**ERRORS_409, 503: {**_E, "description": "Runtime unavailable"}})  # fmt: skip
def create_sandbox_v2(body: NewSandboxV2, m: Manager, request: Request) -> Sandbox:
    """E2B v2 path of create (what current E2B SDKs call): E2B's network settings are honoured
    (``allow_internet_access``, ``network.allowOut``/``denyOut``; by default the guest has a
    network device, so ``get_host`` works on a microVM too); other fields E2B adds are ignored."""
    return _tokened(request, m.create(body))


def _parse_metadata(metadata: str | None) -> dict[str, str] | None:
    if not metadata:
        return None
    from urllib.parse import parse_qsl

    return dict(parse_qsl(metadata, keep_blank_values=True))


def _parse_states(state: list[str] | None) -> list[str] | None:
    if not state:
        return None
    out = [s for item in state for s in item.split(",") if s]
    bad = [s for s in out if s not in ("running", "paused", "creating", "error")]
    if bad:
        raise APIError(
            400, "invalid_request", f"unknown state(s) {bad}; use running, paused, creating, error"
        )
    return out


@router.get("/sandboxes", response_model=list[SandboxDetail], operation_id="listSandboxes",
            tags=["sandboxes"])  # fmt: skip
def list_sandboxes(
    m: Manager,
    metadata: Annotated[str | None, Query(description='Filter, e.g. "user=abc&app=prod".')] = None,
    state: Annotated[list[str] | None, Query(description="running, paused (default both).")] = None,
) -> list[SandboxDetail]:
    """Running and paused sandboxes (E2B's list), newest first."""
    return m.list(_parse_states(state), _parse_metadata(metadata))


@router.get("/v2/sandboxes", response_model=list[SandboxDetail], operation_id="listSandboxesV2",
            tags=["sandboxes"])  # fmt: skip
def list_sandboxes_v2(
    m: Manager,
    metadata: Annotated[str | None, Query()] = None,
    state: Annotated[list[str] | None, Query()] = None,
) -> list[SandboxDetail]:
    """E2B v2 path of the same list."""
    return m.list(_parse_states(state), _parse_metadata(metadata))


@router.get("/sandboxes/{sandboxID}", response_model=SandboxDetail, operation_id="getSandbox",
            tags=["sandboxes"], responses=ERRORS_404)  # fmt: skip
def get_sandbox(sandboxID: str, m: Manager) -> SandboxDetail:  # noqa: N803 - E2B's name
    return m.get(sandboxID)


@router.delete("/sandboxes/{sandboxID}", status_code=204, operation_id="killSandbox",
               tags=["sandboxes"], responses=ERRORS_404)  # fmt: skip
def kill_sandbox(sandboxID: str, m: Manager) -> Response:  # noqa: N803
    """Kill the sandbox. Its checkpoints stay (lineage, forks of them keep working)."""
    m.kill(sandboxID)
    return Response(status_code=204)


@router.post("/sandboxes/{sandboxID}/pause", status_code=204, operation_id="pauseSandbox",
             tags=["sandboxes"], responses=ERRORS_409)  # fmt: skip
def pause_sandbox(sandboxID: str, m: Manager) -> Response:  # noqa: N803
    """Checkpoint, then stop: a paused sandbox holds no CPU or memory. 409 unless running."""
    m.pause(sandboxID)
    return Response(status_code=204)


@router.post("/sandboxes/{sandboxID}/resume", response_model=Sandbox, status_code=201,
             operation_id="resumeSandbox", tags=["sandboxes"], responses=ERRORS_409)  # fmt: skip
def resume_sandbox(
    sandboxID: str,  # noqa: N803
    m: Manager,
    request: Request,
    body: ResumedSandbox | None = None,
) -> Sandbox:
    """Restore the paused sandbox from its head checkpoint. 409 unless paused."""
    body = body or ResumedSandbox()
    return _tokened(request, m.resume(sandboxID, body.timeout, body.autoPause))


@router.post("/sandboxes/{sandboxID}/connect", response_model=Sandbox, operation_id="connectSandbox",
             tags=["sandboxes"], responses={**ERRORS_409, 201: {"model": Sandbox, "description": "Resumed"}})  # fmt: skip
def connect_sandbox(
    sandboxID: str,
    m: Manager,
    response: Response,
    request: Request,
    body: ConnectSandbox | None = None,  # noqa: N803
) -> Sandbox:
    """The sandbox, resumed first if paused (201), else as it is (200); the timeout only grows."""
    sandbox, resumed = m.connect(sandboxID, (body or ConnectSandbox()).timeout)
    response.status_code = 201 if resumed else 200
    return _tokened(request, sandbox)


@router.post("/v2/sandboxes/{sandboxID}/connect", response_model=Sandbox,
             operation_id="connectSandboxV2", tags=["sandboxes"],
             responses={**ERRORS_409, 201: {"model": Sandbox, "description": "Resumed"}})  # fmt: skip
def connect_sandbox_v2(
    sandboxID: str,  # noqa: N803
    m: Manager,
    response: Response,
    request: Request,
    body: ConnectSandbox | None = None,
) -> Sandbox:
    """E2B v2 path of connect."""
    sandbox, resumed = m.connect(sandboxID, (body or ConnectSandbox()).timeout)
    response.status_code = 201 if resumed else 200
    return _tokened(request, sandbox)


@router.post("/sandboxes/{sandboxID}/timeout", status_code=204, operation_id="setSandboxTimeout",
             tags=["sandboxes"], responses=ERRORS_404)  # fmt: skip
def set_timeout(sandboxID: str, body: SandboxTimeoutRequest, m: Manager) -> Response:  # noqa: N803
    """Set the idle timeout: the sandbox times out ``timeout`` seconds from now (0 = never)."""
    m.set_timeout(sandboxID, body.timeout)
    return Response(status_code=204)


@router.post("/sandboxes/{sandboxID}/refreshes", status_code=204, operation_id="refreshSandbox",
             tags=["sandboxes"], responses=ERRORS_409)  # fmt: skip
def refresh(sandboxID: str, m: Manager, body: SandboxRefreshRequest | None = None) -> Response:  # noqa: N803
    """Keep the sandbox alive at least ``duration`` more seconds."""
    m.refresh(sandboxID, (body or SandboxRefreshRequest()).duration)
    return Response(status_code=204)


@router.post("/sandboxes/{sandboxID}/fork", response_model=list[SandboxForkResult], status_code=201,
             operation_id="forkSandbox", tags=["sandboxes"], responses=ERRORS_409)  # fmt: skip
def fork_sandbox(
    sandboxID: str, m: Manager, body: SandboxForkRequest | None = None
) -> list[SandboxForkResult]:  # noqa: N803
    """Checkpoint the sandbox in place (it keeps running, id and timeout untouched), then start
    ``count`` new sandboxes from that checkpoint. One result per fork, each with exactly one of
    ``sandbox`` or ``error``; a non-201 status means no fork was attempted. A paused sandbox
    forks from its head checkpoint without being resumed. 409 when the runtime cannot fork
    memory (unless ``memory`` is false)."""
    body = body or SandboxForkRequest()
    children = m.fork(sandboxID, body.count, body.timeout, body.memory)
    return [
        SandboxForkResult(error=to_error(c)) if isinstance(c, SandboxError)
        else SandboxForkResult(sandbox=c)
        for c in children
    ]  # fmt: skip


# ------------------------------------------------------------------ checkpoints


@router.post("/sandboxes/{sandboxID}/checkpoints", response_model=Checkpoint, status_code=201,
             operation_id="createCheckpoint", tags=["checkpoints"], responses=ERRORS_409)  # fmt: skip
def create_checkpoint(sandboxID: str, m: Manager, body: NewCheckpoint | None = None) -> Checkpoint:  # noqa: N803
    """Incremental checkpoint of the running sandbox (it continues): a layer over its head
    checkpoint storing only what changed since; becomes the new head."""
    return m.checkpoint(sandboxID, (body or NewCheckpoint()).name)


@router.get("/sandboxes/{sandboxID}/checkpoints", response_model=list[Checkpoint],
            operation_id="listCheckpoints", tags=["checkpoints"], responses=ERRORS_404)  # fmt: skip
def list_checkpoints(sandboxID: str, m: Manager) -> list[Checkpoint]:  # noqa: N803
    """Every checkpoint this sandbox took, oldest first (killed sandboxes included)."""
    return m.list_checkpoints(sandboxID)


@router.get("/sandboxes/{sandboxID}/lineage", response_model=list[Checkpoint],
            operation_id="getSandboxLineage", tags=["checkpoints"], responses=ERRORS_404)  # fmt: skip
def sandbox_lineage(sandboxID: str, m: Manager) -> list[Checkpoint]:  # noqa: N803
    """The chain of layers under the sandbox's current state: root first, head last."""
    return m.sandbox_lineage(sandboxID)


@router.get("/checkpoints/{checkpointID}", response_model=Checkpoint, operation_id="getCheckpoint",
            tags=["checkpoints"], responses=ERRORS_404)  # fmt: skip
def get_checkpoint(checkpointID: str, m: Manager) -> Checkpoint:  # noqa: N803
    return m.get_checkpoint(checkpointID)


@router.delete("/checkpoints/{checkpointID}", status_code=204, operation_id="deleteCheckpoint",
               tags=["checkpoints"],
               responses={404: {**_E, "description": "No such checkpoint"},
                          409: {**_E, "description": "A sandbox or another checkpoint needs it"}})  # fmt: skip
def delete_checkpoint(checkpointID: str, m: Manager) -> Response:  # noqa: N803
    """Delete a checkpoint nothing depends on: not the head or fork source of a sandbox that
    is not killed, not the parent of another checkpoint. Its stored objects go at the next
    garbage collection."""
    m.delete_checkpoint(checkpointID)
    return Response(status_code=204)


@router.get("/checkpoints/{checkpointID}/lineage", response_model=list[Checkpoint],
            operation_id="getCheckpointLineage", tags=["checkpoints"], responses=ERRORS_404)  # fmt: skip
def checkpoint_lineage(checkpointID: str, m: Manager) -> list[Checkpoint]:  # noqa: N803
    """The checkpoint and its ancestors, root first (across forks)."""
    return m.lineage(checkpointID)


@router.post("/sandboxes/{sandboxID}/restore", response_model=SandboxDetail,
             operation_id="restoreSandbox", tags=["checkpoints"], responses=ERRORS_409)  # fmt: skip
def restore_sandbox(sandboxID: str, body: RestoreRequest, m: Manager) -> SandboxDetail:  # noqa: N803
    """Put the sandbox (running or paused) in the state of one of its checkpoints; it runs
    afterwards. State not captured in a checkpoint is dropped."""
    return m.restore(sandboxID, body.checkpoint_id)


# ------------------------------------------------------------------ exec


@router.post("/sandboxes/{sandboxID}/exec", response_model=ExecOutput, operation_id="execCommand",
             tags=["exec"], responses=ERRORS_FILES)  # fmt: skip
async def exec_command(
    sandboxID: str,
    body: ExecBody,
    m: Manager,
    calls: Calls,
    request: Request,  # noqa: N803
) -> ExecOutput | Response:
    """Run a command to completion (or start it with ``background``). 409 unless running;
    429 when the guest-call slots (global, this sandbox's, this API key's) are full. A client
    that disconnects kills its command."""
    return await run_exec(calls, m, sandboxID, body, request)


@router.post(
    "/sandboxes/{sandboxID}/exec/stream",
    operation_id="execCommandStream",
    tags=["exec"],
    responses={
        **ERRORS_FILES,
        200: {
            "description": "NDJSON lines of ExecStreamEvent (SSE with Accept: text/event-stream)",
            "content": {
                "application/x-ndjson": {"schema": ExecStreamEvent.model_json_schema()},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        },
    },
    response_class=StreamingResponse,
)  # fmt: skip
async def exec_command_stream(
    sandboxID: str, body: ExecBody, m: Manager, calls: Calls, request: Request
) -> StreamingResponse:  # noqa: N803
    """Run a command, streaming ``start``, ``stdout``/``stderr`` chunks and ``exit`` as they
    happen: NDJSON by default, Server-Sent Events when the client accepts text/event-stream."""
    key = caller_key(request)
    raw = await calls.run(sandboxID, m.exec_stream, sandboxID, body, key=key)
    events = exec_events(calls, m, sandboxID, raw, key)
    sse = "text/event-stream" in request.headers.get("accept", "")

    async def body_iter() -> AsyncIterator[bytes]:
        async for ev in events:
            line = json.dumps(ev.model_dump(), separators=(",", ":"))
            yield sse_wire.event(line, ev.kind).encode() if sse else line.encode() + b"\n"

    return StreamingResponse(
        body_iter(), media_type="text/event-stream" if sse else "application/x-ndjson"
    )


@router.post("/sandboxes/{sandboxID}/processes/{pid}/signal", status_code=204,
             operation_id="signalProcess", tags=["exec"], responses=ERRORS_FILES)  # fmt: skip
async def signal_process(
    sandboxID: str, pid: int, m: Manager, calls: Calls, body: SignalRequest | None = None
) -> Response:  # noqa: N803
    """Send a signal (default SIGTERM) to a guest process and its process group: a control
    call, it never waits for a guest-call slot."""
    await calls.control(m.kill_process, sandboxID, pid, (body or SignalRequest()).signal)
    return Response(status_code=204)


@router.get("/sandboxes/{sandboxID}/metrics", response_model=list[SandboxMetric],
            operation_id="getSandboxMetrics", tags=["sandboxes"], responses=ERRORS_FILES)  # fmt: skip
async def get_sandbox_metrics(
    sandboxID: str,
    m: Manager,
    calls: Calls,
    request: Request,  # noqa: N803
) -> list[SandboxMetric]:
    """E2B's ``get_metrics``: one sample now of the sandbox's CPU, memory and root disk, read
    in the guest. 409 unless running."""
    return [await calls.run(sandboxID, m.metrics, sandboxID, key=caller_key(request))]


@router.get("/sandboxes/{sandboxID}/ports/{port}", response_model=PortForward,
            operation_id="getSandboxHost", tags=["exec"], responses=ERRORS_FILES)  # fmt: skip
async def get_sandbox_host(
    sandboxID: str,  # noqa: N803
    port: Annotated[int, Path(ge=1, le=65535, description="Guest TCP port.")],
    m: Manager,
    calls: Calls,
    request: Request,
) -> PortForward:
    """A loopback ``host:port`` on the service host that forwards TCP to ``port`` in the guest
    (E2B's ``get_host``): serve a web app in the sandbox, open it from the host. The guest
    server must listen on 0.0.0.0. microvm sandboxes need a network device: create them with
    ``network: {"mode": "allowlist", "allow": []}`` (409 otherwise). 409 unless running."""
    return await calls.run(sandboxID, m.expose_port, sandboxID, port, key=caller_key(request))


# ------------------------------------------------------------------ files


@router.get(
    "/sandboxes/{sandboxID}/files",
    operation_id="readFile",
    tags=["files"],
    response_class=Response,
    responses={**ERRORS_FILES, 413: {**_E, "description": "File larger than the limit"},
               200: {"content": {"application/octet-stream": {}}, "description": "File contents"}},
)  # fmt: skip
async def read_file(
    sandboxID: str,
    path: PathQuery,
    m: Manager,
    calls: Calls,
    request: Request,  # noqa: N803
) -> Response:
    """A guest file's contents, streamed in chunks; 413 when it is larger than
    K3STACK_SANDBOX__MAX_UPLOAD_BYTES, or has no fixed size (``/dev/zero``) and is longer
    than 1 MiB; 429 when the sandbox's guest-call slots are full."""
    return await read_response(calls, m, sandboxID, path, request)


@router.put(
    "/sandboxes/{sandboxID}/files",
    response_model=EntryInfo,
    operation_id="writeFile",
    tags=["files"],
    responses={**ERRORS_FILES, 413: {**_E, "description": "Upload larger than the limit"}},
    openapi_extra={"requestBody": {"required": True, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)  # fmt: skip
async def write_file(
    sandboxID: str,  # noqa: N803
    path: PathQuery,
    request: Request,
    m: Manager,
    calls: Calls,
    mode: Annotated[str, Query(pattern=r"^[0-7]{3,4}$", description="Octal permissions.")] = "644",
) -> EntryInfo:
    """Create or replace a guest file with the raw request body (parents are created).
    413 past K3STACK_SANDBOX__MAX_UPLOAD_BYTES, checked before the body is read when the
    client says its length, and while reading otherwise. The body is streamed to the guest
    as it arrives (the file appears only once complete)."""
    limit = m.settings.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise APIError(413, "too_large", f"upload of {declared} bytes is over the limit of {limit}")
    body = request.stream().__aiter__()
    size = 0

    def chunks() -> Iterator[bytes]:
        """The body, pulled from the event loop by the worker thread writing it."""
        nonlocal size
        while True:
            try:
                chunk = anyio.from_thread.run(body.__anext__)
            except StopAsyncIteration:
                return
            size += len(chunk)
            if size > limit:
                raise APIError(413, "too_large", f"upload is over the limit of {limit} bytes")
            yield chunk

    return await calls.run(
        sandboxID, m.write_file_stream, sandboxID, path, chunks(), int(mode, 8),
        key=caller_key(request),
    )  # fmt: skip


@router.delete("/sandboxes/{sandboxID}/files", status_code=204, operation_id="removeFile",
               tags=["files"], responses=ERRORS_FILES)  # fmt: skip
def remove_file(sandboxID: str, path: PathQuery, m: Manager, recursive: bool = False) -> Response:  # noqa: N803
    """Delete a file, or a directory (non-empty ones only with ``recursive``)."""
    m.remove(sandboxID, path, recursive)
    return Response(status_code=204)


@router.get("/sandboxes/{sandboxID}/files/list", response_model=list[EntryInfo],
            operation_id="listDir", tags=["files"], responses=ERRORS_FILES)  # fmt: skip
def list_dir(sandboxID: str, path: PathQuery, m: Manager) -> list[EntryInfo]:  # noqa: N803
    return m.list_dir(sandboxID, path)


@router.get("/sandboxes/{sandboxID}/files/stat", response_model=EntryInfo, operation_id="statFile",
            tags=["files"], responses=ERRORS_FILES)  # fmt: skip
def stat_file(sandboxID: str, path: PathQuery, m: Manager) -> EntryInfo:  # noqa: N803
    """Metadata of a guest path (symlinks are not followed)."""
    return m.stat(sandboxID, path)


@router.post("/sandboxes/{sandboxID}/files/mkdir", response_model=EntryInfo, status_code=201,
             operation_id="makeDir", tags=["files"], responses=ERRORS_FILES)  # fmt: skip
def make_dir(sandboxID: str, path: PathQuery, m: Manager) -> EntryInfo:  # noqa: N803
    """Create a directory and its parents."""
    return m.make_dir(sandboxID, path)


# ------------------------------------------------------------------ templates


@router.post("/templates", response_model=Template, status_code=202, operation_id="createTemplate",
             tags=["templates"], responses=ERRORS_409)  # fmt: skip
def create_template(body: NewTemplate, m: Manager) -> Template:
    """Build a template from ``fromTemplate`` plus ``steps`` with the runtime's image builder;
    poll ``GET /templates/{templateID}`` until ``buildStatus`` is ready or error."""
    return m.build_template(body)


@router.get("/templates", response_model=list[Template], operation_id="listTemplates",
            tags=["templates"])  # fmt: skip
def list_templates(m: Manager) -> list[Template]:
    return m.list_templates()


@router.get("/templates/{templateID}", response_model=Template, operation_id="getTemplate",
            tags=["templates"], responses=ERRORS_404)  # fmt: skip
def get_template(templateID: str, m: Manager) -> Template:  # noqa: N803
    return m.get_template(templateID)


@router.delete("/templates/{templateID}", status_code=204, operation_id="deleteTemplate",
               tags=["templates"], responses=ERRORS_409)  # fmt: skip
def delete_template(templateID: str, m: Manager) -> Response:  # noqa: N803
    """Delete a built template (409 for built-ins and templates sandboxes still use)."""
    m.delete_template(templateID)
    return Response(status_code=204)


# ------------------------------------------------------------------ admin


@router.post("/gc", response_model=GCReport, operation_id="collectGarbage", tags=["admin"])
def collect_garbage(
    m: Manager,
    grace_s: Annotated[
        float | None,
        Query(
            ge=0,
            le=10 * 365 * 24 * 3600,
            allow_inf_nan=False,
            description="Keep unreferenced objects younger than this (default gc_grace_s).",
        ),
    ] = None,
) -> GCReport:
    """Admin: collect garbage now (the reaper also runs it every ``gc_interval_s``): delete
    checkpoints only killed sandboxes had and every stored object no live checkpoint references."""
    return m.collect_garbage(grace_s)
