"""``SandboxManager``: the one engine behind the sandbox routes.

It owns policy; runtimes own mechanism (:mod:`services.sandbox.runtime.base`). The manager
decides which runtime a sandbox gets, when it times out and what then happens (pause or kill),
when periodic snapshots are taken, which checkpoint a resume restores, and it keeps the record:
sandbox rows, the checkpoint graph and templates in SQL, manifests in the object store.

Invariants (checked by :meth:`SandboxManager.check_invariants`):

* a sandbox is ``running`` iff the manager holds a live handle for it;
* a ``paused`` sandbox has a ``head_checkpoint_id`` whose chain of parents is complete in SQL
  and whose manifests are in the store — so a restarted service can resume it;
* lifecycle operations on one sandbox (create, pause, resume, checkpoint, restore, fork's
  checkpoint, kill, timeout) are serialised by that sandbox's lock; exec and file operations
  are not (the runtime handles concurrent use), they only check the state first.

Pause = checkpoint + stop; resume = restore of the head checkpoint into the same workdir (the
runtime may reuse what is still there); fork = checkpoint in place (the source keeps running)
then N restores into new sandboxes, each reported on its own.

Garbage: nothing is deleted when a sandbox is killed; :meth:`SandboxManager.collect_garbage`
(the reaper every ``gc_interval_s``, or ``POST /gc``) marks what the checkpoints of sandboxes
that are not killed still reach, and sweeps the rest of the checkpoint rows and stored objects.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from services.sandbox.lifecycle.errors import (
    Conflict,
    Internal,
    Invalid,
    NotFound,
    SandboxError,
    Unavailable,
    runtime_errors,
)
from services.sandbox.lifecycle.gc import MANIFEST_PREFIX, GarbageCollector
from services.sandbox.lifecycle.reaper import Reaper
from services.sandbox.lifecycle.runtimes import RUNTIME_ORDER, pick_runtime
from services.sandbox.lifecycle.templates import TemplateCatalog
from services.sandbox.lifecycle.views import aware as _aware
from services.sandbox.lifecycle.views import utcnow
from services.sandbox.models import CheckpointRow, SandboxRow, TemplateRow
from services.sandbox.runtime.base import (
    CheckpointManifest,
    ExecRequest,
    FileInfo,
    GuestPathError,
    NetworkPolicy,
    Runtime,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxRuntimeError,
    SandboxSpec,
    VMHandle,
    normalize_guest_path,
)
from shared.contracts.sandbox import (
    NEVER,
    Checkpoint,
    EntryInfo,
    ExecBody,
    ExecOutput,
    ExecStreamEvent,
    GCReport,
    Lifecycle,
    NewSandbox,
    NewTemplate,
    PortForward,
    RuntimeInfo,
    Sandbox,
    SandboxDetail,
    Template,
)
from shared.db import ServiceDatabase
from shared.netguard import check_allowlist
from shared.objectstore import ObjectStore
from shared.settings import SandboxSettings, get_settings

log = logging.getLogger("k3stack.sandbox")


def _deployed_fence(runtime: str, allow: list[str], sandbox: SandboxSettings) -> None:
    """Deployed mode: no `process` runtime unless enabled, no internal allowlist destinations."""
    if get_settings().mode != "deployed":
        return
    if runtime == "process" and not sandbox.allow_process_runtime:
        raise Conflict(
            "unsupported",
            "runtime 'process' is not a security boundary and is off in deployed mode "
            "(K3STACK_SANDBOX__ALLOW_PROCESS_RUNTIME=true enables it)",
        )  # fmt: skip
    refused = check_allowlist(allow, deployed=True)
    if refused:
        raise Invalid("invalid_request", refused)


@dataclass
class Live:
    """A running sandbox as the manager holds it."""

    handle: VMHandle
    runtime: Runtime
    end_at: datetime | None


class SandboxManager:
    """Sandboxes, checkpoints and templates over a set of runtimes.

    Args:
        settings: the sandbox section of the settings.
        data_dir: where sandbox workdirs live (``<data_dir>/vms/<sandbox id>``).
        db: the service database (migrated by the caller).
        store: object store for checkpoint manifests (runtimes put bodies there too).
        runtimes: name -> runtime (see :func:`~services.sandbox.lifecycle.runtimes.make_runtimes`).
        clock: current UTC time; tests pass a fake one to drive timeouts.
    """

    def __init__(
        self,
        *,
        settings: SandboxSettings,
        data_dir: Path,
        db: ServiceDatabase,
        store: ObjectStore,
        runtimes: dict[str, Runtime],
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings = settings
        self.data_dir = Path(data_dir)
        self.db = db
        self.store = store
        self.runtimes = runtimes
        self.clock = clock
        self._live: dict[str, Live] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self.templates = TemplateCatalog(
            db=db, runtimes=runtimes, default_runtime=settings.runtime, clock=clock
        )
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self.gc = GarbageCollector(
            settings=settings, data_dir=self.data_dir, db=db, store=store, runtimes=runtimes,
            is_live=lambda sandbox_id: sandbox_id in self._live,
        )  # fmt: skip
        self.reaper = Reaper(self)

    # ------------------------------------------------------------------ start / stop

    def start(self, background: bool = True) -> None:
        """Seed built-in templates, adopt or recover sandboxes, start the reaper thread."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.templates.seed()
        self.recover()
        if background:
            self._reaper = threading.Thread(
                target=self.reaper.loop, args=(self._stop,), name="k3stack-reaper", daemon=True
            )
            self._reaper.start()

    def close(self) -> None:
        """Stop background work, then apply ``on_shutdown`` to running sandboxes: ``pause``
        checkpoints and stops them (no VM outlives the service; resume brings them back),
        ``keep`` leaves them running for the next manager to adopt."""
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(timeout=10)
        if self.settings.on_shutdown == "pause":
            for sandbox_id in list(self._live):
                try:
                    self.pause(sandbox_id, reason="shutdown")
                except Exception:  # noqa: BLE001 - one failure must not strand the others
                    log.exception("pausing sandbox %s at shutdown", sandbox_id)
                    self._lose(sandbox_id, "pausing it at shutdown failed")
        self.templates.close()
        for rt in self.runtimes.values():
            rt.close()

    def recover(self) -> None:
        """Rebuild the live set from SQL after a (re)start.

        Running rows whose VM is still alive are adopted (the runtime reconnects to the VM
        and its agent); the others — VM gone, or alive but not adoptable (then it is stopped
        first, so nothing is left running or mapped) — become ``paused`` at their last
        checkpoint (periodic snapshots bound what is lost) or ``error`` when they have none,
        with the reason in ``error``. Rows caught ``creating`` are stopped the same way.
        Paused rows need nothing: resume restores them from the store.
        """
        with self.db.session() as s:
            rows = s.scalars(
                select(SandboxRow).where(SandboxRow.state.in_(("running", "creating")))
            ).all()
            for row in rows:
                rt = self.runtimes.get(row.runtime)
                handle = VMHandle.model_validate(row.handle) if row.handle else None
                alive = bool(rt and handle and rt.is_alive(handle))
                if row.state == "running" and alive and rt.adopt(handle):  # type: ignore[union-attr, arg-type]
                    self._live[row.id] = Live(handle, rt, _aware(row.end_at))  # type: ignore[arg-type]
                    log.info("sandbox %s: re-attached to its VM after a restart", row.id)
                    continue
                if rt is not None and handle is not None:
                    self._stop_quietly(rt, handle)
                why = (
                    "the service restarted and could not re-attach to the sandbox's VM (stopped)"
                    if alive
                    else "the service restarted and the sandbox's VM was gone"
                )
                self._mark_lost(row, why)

    def _stop_quietly(self, rt: Runtime, handle: VMHandle) -> None:
        """Release whatever is left of a VM (processes, memory file); never raises."""
        try:
            rt.stop(handle)
        except Exception:  # noqa: BLE001 - cleanup of a dead VM must not fail its caller
            log.exception("stopping what is left of sandbox %s", handle.sandbox_id)

    def _lose(self, sandbox_id: str, why: str) -> None:
        """Stop a live sandbox that cannot be saved now; its row falls back to its last
        checkpoint (or error). No VM is left behind."""
        live = self._live.pop(sandbox_id, None)
        if live is not None:
            self._stop_quietly(live.runtime, live.handle)
        with self.db.session() as s:
            row = s.get(SandboxRow, sandbox_id)
            if row is not None and row.state in ("running", "creating"):
                self._mark_lost(row, why)

    def _mark_lost(self, row: SandboxRow, why: str) -> None:
        now = self.clock()
        if row.head_checkpoint_id:
            row.state = "paused"
            row.error = f"{why} at {now.isoformat()}; paused at checkpoint {row.head_checkpoint_id} (later changes are lost)"
        else:
            row.state = "error"
            row.error = f"{why} at {now.isoformat()}; no checkpoint to recover from"
        row.handle = None
        row.updated_at = now
        log.warning("sandbox %s: %s", row.id, row.error)

    def _lock(self, sandbox_id: str) -> threading.RLock:
        with self._locks_guard:
            lock = self._locks.get(sandbox_id)
            if lock is None:
                lock = self._locks[sandbox_id] = threading.RLock()
            return lock

    def workdir(self, sandbox_id: str) -> Path:
        return self.data_dir / "vms" / sandbox_id

    def running_ids(self) -> list[str]:
        """Ids of the sandboxes this manager holds running."""
        return list(self._live)

    def live_handle(self, sandbox_id: str) -> VMHandle | None:
        """The runtime handle of a running sandbox (None unless running here)."""
        live = self._live.get(sandbox_id)
        return live.handle if live else None

    # ------------------------------------------------------------------ runtimes

    def runtime_infos(self) -> list[RuntimeInfo]:
        try:
            default = pick_runtime(None, self.settings.runtime, self.runtimes).name
        except RuntimeUnavailable:
            default = None
        out = []
        for name in RUNTIME_ORDER:
            rt = self.runtimes.get(name)
            if rt is None:
                out.append(
                    RuntimeInfo(
                        name=name, available=False, reason="runtime not installed",
                        memory_checkpoint=name != "process", fork=name != "process",
                        network_allowlist=name != "process", default=False,
                    )
                )  # fmt: skip
                continue
            ok, why = rt.available()
            caps = rt.capabilities
            out.append(
                RuntimeInfo(
                    name=name, available=ok, reason=why, memory_checkpoint=caps.memory_checkpoint,
                    fork=caps.fork, network_allowlist=caps.network_allowlist,
                    default=name == default,
                )
            )  # fmt: skip
        return out

    # ------------------------------------------------------------------ views

    def _detail(self, row: SandboxRow) -> SandboxDetail:
        live = self._live.get(row.id)
        rt = self.runtimes.get(row.runtime)
        end_at = live.end_at if live else _aware(row.end_at)
        return SandboxDetail(
            templateID=row.template_id,
            sandboxID=row.id,
            runtime=row.runtime,
            state=row.state,  # type: ignore[arg-type]
            startedAt=_aware(row.started_at),  # type: ignore[arg-type]
            endAt=(end_at or NEVER) if row.state == "running" else _aware(row.updated_at),  # type: ignore[arg-type]
            cpuCount=row.cpu_count,
            memoryMB=row.memory_mb,
            metadata=row.metadata_ or {},
            network=row.network or {},  # type: ignore[arg-type]
            guest_addresses=self._guest_addresses(rt, row.network),
            lifecycle=Lifecycle(onTimeout=row.on_timeout),  # type: ignore[arg-type]
            timeout_s=row.timeout_s,
            memory_checkpoint=bool(rt and rt.capabilities.memory_checkpoint),
            head_checkpoint_id=row.head_checkpoint_id,
            forked_from=row.forked_from,
            error=row.error,
        )

    @staticmethod
    def _guest_addresses(rt: Runtime | None, network: dict | None) -> dict[str, str]:
        """The runtime's guest-side address of each allowed destination (a pure function of
        the allowlist, so it is the same after pause, resume and fork)."""
        mapping = getattr(rt, "guest_addresses", None)
        if mapping is None or not network or network.get("mode") != "allowlist":
            return {}
        return mapping(SandboxSpec(network=NetworkPolicy.model_validate(network)))

    @staticmethod
    def _summary(row: SandboxRow) -> Sandbox:
        return Sandbox(
            templateID=row.template_id,
            sandboxID=row.id,
            runtime=row.runtime,
            state=row.state,  # type: ignore[arg-type]
        )

    @staticmethod
    def _checkpoint_view(row: CheckpointRow) -> Checkpoint:
        return Checkpoint(
            id=row.id,
            sandbox_id=row.sandbox_id,
            parent_id=row.parent_id,
            kind=row.kind,  # type: ignore[arg-type]
            name=row.name,
            runtime=row.runtime,
            template_id=row.template_id,
            memory=row.memory,
            created_at=_aware(row.created_at),  # type: ignore[arg-type]
            bytes_stored=row.bytes_stored,
            cpu_count=row.cpu_count,
            memory_mb=row.memory_mb,
            info=row.info or {},
        )

    def _row(self, s: Any, sandbox_id: str) -> SandboxRow:
        row = s.get(SandboxRow, sandbox_id)
        if row is None:
            raise NotFound.of("sandbox", sandbox_id)
        if row.state == "killed":
            raise NotFound("not_found", f"sandbox {sandbox_id!r} was killed")
        return row

    def get(self, sandbox_id: str) -> SandboxDetail:
        with self.db.session() as s:
            return self._detail(self._row(s, sandbox_id))

    def list(
        self, states: list[str] | None = None, metadata: dict[str, str] | None = None
    ) -> list[SandboxDetail]:
        wanted = states or ["running", "paused"]
        with self.db.session() as s:
            rows = s.scalars(
                select(SandboxRow)
                .where(SandboxRow.state.in_(wanted))
                .order_by(SandboxRow.created_at.desc())
            ).all()
            out = []
            for row in rows:
                md = row.metadata_ or {}
                if metadata and any(md.get(k) != v for k, v in metadata.items()):
                    continue
                out.append(self._detail(row))
            return out

    # ------------------------------------------------------------------ create / kill

    def create(self, req: NewSandbox) -> Sandbox:
        template = self.templates.ready(req.templateID)
        requested = req.runtime
        if template.runtime != "any":
            if requested not in (None, "auto", template.runtime):
                raise Invalid("invalid_request",
                    f"template {template.id!r} is built for runtime {template.runtime!r}, "
                    f"not {requested!r}",
                )  # fmt: skip
            requested = template.runtime
        with runtime_errors():
            rt = pick_runtime(requested, self.settings.runtime, self.runtimes)
        _deployed_fence(rt.name, req.network.allow, self.settings)
        if req.network.mode == "allowlist" and not rt.capabilities.network_allowlist:
            raise Conflict("unsupported",
                f"runtime {rt.name!r} cannot restrict the network to an allowlist",
            )  # fmt: skip
        sandbox_id = f"sbx-{secrets.token_hex(8)}"
        now = self.clock()
        timeout = self.settings.default_timeout_s if req.timeout is None else req.timeout
        on_timeout = (
            self.settings.timeout_action
            if req.autoPause is None
            else ("pause" if req.autoPause else "kill")
        )
        env = {**(template.image or {}).get("env", {}), **req.envVars}
        spec = SandboxSpec(
            image=template.id, cpu=req.cpuCount, memory_mb=req.memoryMB, env=env,
            network=req.network,
        )  # fmt: skip
        with self.db.session() as s:
            s.add(
                SandboxRow(
                    id=sandbox_id, template_id=template.id, runtime=rt.name, state="creating",
                    cpu_count=req.cpuCount, memory_mb=req.memoryMB, timeout_s=timeout,
                    on_timeout=on_timeout, metadata_=dict(req.metadata), env_vars=env,
                    network=req.network.model_dump(), created_at=now, started_at=now,
                    end_at=None, updated_at=now,
                )
            )  # fmt: skip
            tpl = s.get(TemplateRow, template.id)
            if tpl is not None:
                tpl.spawn_count += 1
        with self._lock(sandbox_id):
            try:
                with runtime_errors(sandbox_id):
                    handle = rt.create(sandbox_id, spec, self.workdir(sandbox_id))
            except SandboxError as exc:
                self._set_error(sandbox_id, exc.message)
                shutil.rmtree(self.workdir(sandbox_id), ignore_errors=True)
                raise
            return self._went_running(sandbox_id, handle, rt, timeout)

    def _went_running(
        self, sandbox_id: str, handle: VMHandle, rt: Runtime, timeout: int | None = None,
        head: str | None = None,
    ) -> Sandbox:  # fmt: skip
        now = self.clock()
        with self.db.session() as s:
            row = s.get(SandboxRow, sandbox_id)
            assert row is not None
            if timeout is not None:
                row.timeout_s = timeout
            end_at = now + timedelta(seconds=row.timeout_s) if row.timeout_s else None
            row.state = "running"
            row.started_at = now
            row.end_at = end_at
            row.updated_at = now
            row.handle = handle.model_dump(mode="json")
            row.last_snapshot_at = now
            if head is not None:
                row.head_checkpoint_id = head
            self._live[sandbox_id] = Live(handle, rt, end_at)
            return self._summary(row)

    def _set_error(self, sandbox_id: str, message: str) -> None:
        with self.db.session() as s:
            row = s.get(SandboxRow, sandbox_id)
            if row is not None:
                row.state = "error"
                row.error = message
                row.handle = None
                row.updated_at = self.clock()

    def kill(self, sandbox_id: str) -> None:
        with self._lock(sandbox_id):
            with self.db.session() as s:
                row = self._row(s, sandbox_id)
                live = self._live.pop(sandbox_id, None)
                if live is not None:
                    try:
                        live.runtime.destroy(live.handle)
                    except SandboxRuntimeError:
                        log.exception("destroying sandbox %s", sandbox_id)
                elif row.handle and (rt := self.runtimes.get(row.runtime)) is not None:
                    self._stop_quietly(rt, VMHandle.model_validate(row.handle))  # leftovers
                shutil.rmtree(self.workdir(sandbox_id), ignore_errors=True)
                row.state = "killed"
                row.handle = None
                row.end_at = None
                row.updated_at = self.clock()

    # ------------------------------------------------------------------ running checks

    def _require_running(self, sandbox_id: str) -> Live:
        live = self._live.get(sandbox_id)
        if live is not None:
            return live
        with self.db.session() as s:
            row = self._row(s, sandbox_id)
            state = row.state
            err = row.error
        if state == "paused":
            raise Conflict("sandbox_paused",
                f"sandbox {sandbox_id!r} is paused; resume it first "
                f"(POST /sandboxes/{sandbox_id}/resume or /connect)",
            )  # fmt: skip
        if state == "creating":
            raise Conflict("not_running", f"sandbox {sandbox_id!r} is still being created")
        raise Conflict("not_running", f"sandbox {sandbox_id!r} is in state {state!r}: {err}")

    def touch(self, sandbox_id: str) -> None:
        """Use restarts the idle timeout (in memory; persisted by lifecycle changes and ticks)."""
        live = self._live.get(sandbox_id)
        if live is None:
            return
        with self.db.session() as s:
            row = s.get(SandboxRow, sandbox_id)
            timeout = row.timeout_s if row else 0
        if timeout:
            new_end = self.clock() + timedelta(seconds=timeout)
            if live.end_at is None or new_end > live.end_at:
                live.end_at = new_end

    @contextmanager
    def _guest_op(self, sandbox_id: str) -> Iterator[Live]:
        """Exec/file operations: the sandbox must be running; if it stops mid-way, say so."""
        live = self._require_running(sandbox_id)
        try:
            with runtime_errors(sandbox_id):
                try:
                    yield live
                except SandboxNotRunning:
                    self._require_running(sandbox_id)  # paused meanwhile: a clear 409
                    raise
        finally:
            self.touch(sandbox_id)

    # ------------------------------------------------------------------ exec

    def _exec_request(self, body: ExecBody) -> ExecRequest:
        """The runtime's request: time and output bounded by the settings (0 = the maximum)."""
        limit = self.settings.exec_max_timeout_s
        timeout = body.timeout_s if "timeout_s" in body.model_fields_set else min(60, limit)
        if timeout > limit:
            raise Invalid("invalid_request",
                f"timeout_s {timeout:g} is above the limit of {limit} s "
                "(K3STACK_SANDBOX__EXEC_MAX_TIMEOUT_S); 0 means the limit",
            )  # fmt: skip
        try:
            return ExecRequest(
                argv=body.argv, cmd=body.cmd, env=body.env,
                cwd=normalize_guest_path(body.cwd) if body.cwd else None,
                stdin=body.stdin.encode() if body.stdin is not None else None,
                timeout_s=timeout or limit, background=body.background,
                max_output_bytes=self.settings.exec_max_output_bytes,
            )  # fmt: skip
        except GuestPathError as exc:
            raise Invalid("invalid_path", str(exc)) from exc
        except ValueError as exc:
            raise Invalid("invalid_request", str(exc).split("\n", 1)[-1].strip()) from exc

    def exec(self, sandbox_id: str, body: ExecBody) -> ExecOutput:
        req = self._exec_request(body)
        with self._guest_op(sandbox_id) as live:
            res = live.runtime.exec(live.handle, req)
        return ExecOutput(
            exit_code=res.exit_code, stdout=res.stdout, stderr=res.stderr,
            timed_out=res.timed_out, truncated=res.truncated, pid=res.pid,
            duration_ms=res.duration_ms,
        )  # fmt: skip

    def exec_stream(self, sandbox_id: str, body: ExecBody) -> Iterator[ExecStreamEvent]:
        """Checks happen now (errors raise before any byte is sent); events come lazily.

        If the sandbox goes away mid-command (paused, killed, crashed) the stream ends with an
        ``error`` event saying so instead of an ``exit``.
        """
        req = self._exec_request(body)
        live = self._require_running(sandbox_id)
        events = live.runtime.exec_stream(live.handle, req)

        def gen() -> Iterator[ExecStreamEvent]:
            try:
                for ev in events:
                    yield ExecStreamEvent(**ev.model_dump())
            except SandboxRuntimeError as exc:
                state = "gone"
                with self.db.session() as s:
                    row = s.get(SandboxRow, sandbox_id)
                    if row is not None:
                        state = row.state
                yield ExecStreamEvent(kind="error", data=f"sandbox {sandbox_id} is {state}: {exc}")
            finally:
                self.touch(sandbox_id)

        return gen()

    def expose_port(self, sandbox_id: str, port: int) -> PortForward:
        with self._guest_op(sandbox_id) as live:
            return PortForward(port=port, host=live.runtime.expose_port(live.handle, port))

    def kill_process(self, sandbox_id: str, pid: int, signal: int) -> None:
        with self._guest_op(sandbox_id) as live:
            live.runtime.kill_process(live.handle, pid, signal)

    # ------------------------------------------------------------------ files

    @staticmethod
    def _path(path: str) -> str:
        try:
            return normalize_guest_path(path)
        except GuestPathError as exc:
            raise Invalid("invalid_path", str(exc)) from exc

    @staticmethod
    def entry(info: FileInfo) -> EntryInfo:
        kind = "symlink" if info.is_symlink else "dir" if info.is_dir else "file"
        return EntryInfo(
            name=info.name, path=info.path, type=kind, size=info.size, mode=info.mode,
            modified_time=datetime.fromtimestamp(info.mtime, UTC),
        )  # fmt: skip

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        """Contents of a guest file, at most ``max_upload_bytes`` (413 past it)."""
        p = self._path(path)
        with self._guest_op(sandbox_id) as live:
            return live.runtime.read_file(live.handle, p, self.settings.max_upload_bytes)

    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int) -> EntryInfo:
        p = self._path(path)
        with self._guest_op(sandbox_id) as live:
            return self.entry(live.runtime.write_file(live.handle, p, data, mode))

    def write_file_stream(
        self, sandbox_id: str, path: str, chunks: Iterable[bytes], mode: int
    ) -> EntryInfo:
        """Write a guest file from chunks as they arrive (an upload is never held whole)."""
        p = self._path(path)
        with self._guest_op(sandbox_id) as live:
            return self.entry(live.runtime.write_file_stream(live.handle, p, chunks, mode))

    def list_dir(self, sandbox_id: str, path: str) -> list[EntryInfo]:
        p = self._path(path)
        with self._guest_op(sandbox_id) as live:
            return [self.entry(i) for i in live.runtime.list_dir(live.handle, p)]

    def stat(self, sandbox_id: str, path: str) -> EntryInfo:
        p = self._path(path)
        with self._guest_op(sandbox_id) as live:
            return self.entry(live.runtime.stat(live.handle, p))

    def remove(self, sandbox_id: str, path: str, recursive: bool) -> None:
        p = self._path(path)
        with self._guest_op(sandbox_id) as live:
            live.runtime.remove(live.handle, p, recursive)

    def make_dir(self, sandbox_id: str, path: str) -> EntryInfo:
        p = self._path(path)
        with self._guest_op(sandbox_id) as live:
            return self.entry(live.runtime.make_dir(live.handle, p))

    # ------------------------------------------------------------------ checkpoints

    def _save_checkpoint(
        self, m: CheckpointManifest, row: SandboxRow, kind: str, name: str | None, memory: bool
    ) -> CheckpointRow:
        key = f"{MANIFEST_PREFIX}{m.id}.json"
        body = m.model_dump_json().encode()
        self.store.put(key, body, content_type="application/json")
        info: dict[str, Any] = {
            "memory_bytes": m.memory_bytes, "total_pages": m.total_pages,
            "nonzero_pages": m.nonzero_pages, "changed_pages": m.changed_pages,
            "new_pages": m.new_pages, "stats_ms": m.stats, **m.runtime_data,
        }  # fmt: skip
        return CheckpointRow(
            id=m.id, sandbox_id=row.id, parent_id=m.parent_id, runtime=m.runtime,
            template_id=row.template_id, kind=kind, name=name, memory=memory,
            manifest_key=key, bytes_stored=m.stored_bytes + len(body),
            bytes_total=m.memory_bytes, cpu_count=row.cpu_count, memory_mb=row.memory_mb,
            created_at=_aware(m.created_at) or self.clock(), info=info,
        )  # fmt: skip

    def manifest(self, checkpoint_id: str) -> CheckpointManifest:
        with self.db.session() as s:
            row = s.get(CheckpointRow, checkpoint_id)
            if row is None:
                raise NotFound.of("checkpoint", checkpoint_id)
            key = row.manifest_key
        try:
            return CheckpointManifest.model_validate_json(self.store.get(key))
        except KeyError as exc:
            raise Internal(
                "checkpoint_missing", f"manifest of checkpoint {checkpoint_id} is gone: {exc}"
            ) from exc

    def _take_checkpoint(
        self, sandbox_id: str, kind: str, name: str | None = None
    ) -> CheckpointRow:
        """Checkpoint a running sandbox (caller holds its lock); it keeps running."""
        live = self._require_running(sandbox_id)
        with self.gc.gate.shared():
            return self._take_checkpoint_gated(sandbox_id, live, kind, name)

    def _take_checkpoint_gated(
        self, sandbox_id: str, live: Live, kind: str, name: str | None
    ) -> CheckpointRow:
        with self.db.session() as s:
            head = self._row(s, sandbox_id).head_checkpoint_id
        parent = self.manifest(head) if head else None
        with runtime_errors(sandbox_id):
            m = live.runtime.checkpoint(live.handle, parent, self.store)
        with self.db.session() as s:
            row = self._row(s, sandbox_id)
            ck = self._save_checkpoint(
                m, row, kind, name, live.runtime.capabilities.memory_checkpoint
            )
            s.add(ck)
            s.flush()
            row.head_checkpoint_id = m.id
            row.last_snapshot_at = self.clock()
            row.updated_at = self.clock()
            return ck

    def checkpoint(self, sandbox_id: str, name: str | None = None) -> Checkpoint:
        with self._lock(sandbox_id):
            return self._checkpoint_view(self._take_checkpoint(sandbox_id, "manual", name))

    def list_checkpoints(self, sandbox_id: str) -> list[Checkpoint]:
        with self.db.session() as s:
            if s.get(SandboxRow, sandbox_id) is None:
                raise NotFound.of("sandbox", sandbox_id)
            rows = s.scalars(
                select(CheckpointRow)
                .where(CheckpointRow.sandbox_id == sandbox_id)
                .order_by(CheckpointRow.created_at)
            ).all()
            return [self._checkpoint_view(r) for r in rows]

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        with self.db.session() as s:
            row = s.get(CheckpointRow, checkpoint_id)
            if row is None:
                raise NotFound.of("checkpoint", checkpoint_id)
            return self._checkpoint_view(row)

    def lineage(self, checkpoint_id: str) -> list[Checkpoint]:
        """The checkpoint and its ancestors, oldest first (crossing forks to their source)."""
        chain: list[Checkpoint] = []
        with self.db.session() as s:
            cur: str | None = checkpoint_id
            while cur is not None:
                row = s.get(CheckpointRow, cur)
                if row is None:
                    if not chain:
                        raise NotFound.of("checkpoint", checkpoint_id)
                    raise Internal("checkpoint_missing", f"ancestor {cur} is missing")
                chain.append(self._checkpoint_view(row))
                cur = row.parent_id
        chain.reverse()
        return chain

    def sandbox_lineage(self, sandbox_id: str) -> list[Checkpoint]:
        with self.db.session() as s:
            head = self._row(s, sandbox_id).head_checkpoint_id
        return self.lineage(head) if head else []

    def _chain(self, checkpoint_id: str) -> list[CheckpointManifest]:
        return [self.manifest(c.id) for c in self.lineage(checkpoint_id)]

    # ------------------------------------------------------------------ pause / resume

    def pause(self, sandbox_id: str, reason: str = "pause") -> Checkpoint:
        """Checkpoint, then stop: no CPU or memory held. Returns the pause checkpoint."""
        with self._lock(sandbox_id):
            if sandbox_id not in self._live:
                with self.db.session() as s:
                    state = self._row(s, sandbox_id).state
                raise Conflict("not_running", f"sandbox {sandbox_id!r} is {state}, not running")
            ck = self._take_checkpoint(sandbox_id, "pause", None if reason == "pause" else reason)
            live = self._live.pop(sandbox_id)
            try:
                live.runtime.stop(live.handle)
            except SandboxRuntimeError:
                log.exception("stopping sandbox %s after its pause checkpoint", sandbox_id)
            with self.db.session() as s:
                row = self._row(s, sandbox_id)
                row.state = "paused"
                row.handle = None
                row.end_at = None
                row.updated_at = self.clock()
            return self._checkpoint_view(ck)

    def resume(
        self, sandbox_id: str, timeout: int | None = None, auto_pause: bool | None = None
    ) -> Sandbox:
        with self._lock(sandbox_id):
            with self.db.session() as s:
                row = self._row(s, sandbox_id)
                if row.state == "running":
                    raise Conflict("already_running", f"sandbox {sandbox_id!r} is running")
                if row.state != "paused" or not row.head_checkpoint_id:
                    raise Conflict("not_paused",
                        f"sandbox {sandbox_id!r} is {row.state} and has nothing to resume from",
                    )  # fmt: skip
                head, runtime_name = row.head_checkpoint_id, row.runtime
                if auto_pause is not None:
                    row.on_timeout = "pause" if auto_pause else "kill"
            rt = self.runtimes.get(runtime_name)
            if rt is None:
                raise Unavailable("runtime_unavailable", f"runtime {runtime_name!r} is gone")
            with self.gc.holding([head]), self.gc.gate.shared():
                chain = self._chain(head)
                with runtime_errors(sandbox_id):
                    handle = rt.restore(sandbox_id, chain, self.store, self.workdir(sandbox_id))
            with self.db.session() as s:
                s.get(SandboxRow, sandbox_id).error = None  # type: ignore[union-attr]
            return self._went_running(sandbox_id, handle, rt, timeout)

    def connect(self, sandbox_id: str, timeout: int | None = None) -> tuple[Sandbox, bool]:
        """E2B's connect: resume if paused; extend the timeout. Returns (sandbox, resumed)."""
        with self._lock(sandbox_id):
            live = self._live.get(sandbox_id)
            if live is None:
                return self.resume(sandbox_id, timeout), True
            with self.db.session() as s:
                row = self._row(s, sandbox_id)
                if timeout is not None:
                    new_end = self.clock() + timedelta(seconds=timeout)
                    if live.end_at is None or new_end > live.end_at:
                        live.end_at = new_end
                        row.end_at = new_end
                return self._summary(row), False

    def set_timeout(self, sandbox_id: str, timeout: int) -> None:
        with self._lock(sandbox_id), self.db.session() as s:
            row = self._row(s, sandbox_id)
            row.timeout_s = timeout
            end = self.clock() + timedelta(seconds=timeout) if timeout else None
            row.end_at = end
            live = self._live.get(sandbox_id)
            if live is not None:
                live.end_at = end

    def refresh(self, sandbox_id: str, duration: int) -> None:
        with self._lock(sandbox_id), self.db.session() as s:
            row = self._row(s, sandbox_id)
            live = self._live.get(sandbox_id)
            if live is None:
                raise Conflict("not_running", f"sandbox {sandbox_id!r} is {row.state}")
            new_end = self.clock() + timedelta(seconds=duration)
            if live.end_at is not None and new_end > live.end_at:
                live.end_at = new_end
                row.end_at = new_end

    # ------------------------------------------------------------------ restore / fork

    def _in_history(self, sandbox_id: str, checkpoint_id: str) -> bool:
        """Whether the checkpoint is this sandbox's own or an ancestor of one of its states."""
        with self.db.session() as s:
            ck = s.get(CheckpointRow, checkpoint_id)
            if ck is None:
                raise NotFound.of("checkpoint", checkpoint_id)
            if ck.sandbox_id == sandbox_id:
                return True
            row = self._row(s, sandbox_id)
            starts = [row.head_checkpoint_id, row.forked_from]
        for start in starts:
            if start and any(c.id == checkpoint_id for c in self.lineage(start)):
                return True
        return False

    def restore(self, sandbox_id: str, checkpoint_id: str) -> SandboxDetail:
        """Put the sandbox in the state of ``checkpoint_id`` (running). Unsaved state is dropped."""
        with self._lock(sandbox_id), self.gc.holding([checkpoint_id]):
            with self.db.session() as s:
                row = self._row(s, sandbox_id)
                runtime_name = row.runtime
            if not self._in_history(sandbox_id, checkpoint_id):
                raise Conflict("foreign_checkpoint",
                    f"checkpoint {checkpoint_id!r} is not in the history of sandbox "
                    f"{sandbox_id!r}; fork its sandbox instead",
                )  # fmt: skip
            rt = self.runtimes.get(runtime_name)
            if rt is None:
                raise Unavailable("runtime_unavailable", f"runtime {runtime_name!r} is gone")
            chain = self._chain(checkpoint_id)
            live = self._live.pop(sandbox_id, None)
            if live is not None:
                with runtime_errors(sandbox_id):
                    live.runtime.destroy(live.handle)
            shutil.rmtree(self.workdir(sandbox_id), ignore_errors=True)
            try:
                with runtime_errors(sandbox_id), self.gc.gate.shared():
                    handle = rt.restore(sandbox_id, chain, self.store, self.workdir(sandbox_id))
            except SandboxError as exc:
                with self.db.session() as s:
                    row = s.get(SandboxRow, sandbox_id)
                    assert row is not None
                    if row.head_checkpoint_id:
                        row.state, row.handle = "paused", None
                        row.error = f"restore of {checkpoint_id} failed: {exc.message}"
                raise
            self._went_running(sandbox_id, handle, rt, head=checkpoint_id)
            return self.get(sandbox_id)

    def fork(
        self, sandbox_id: str, count: int, timeout: int | None = None, memory: bool = True
    ) -> list[Sandbox | SandboxError]:
        """One entry per child: the running child, or the error that stopped it."""
        if count > self.settings.max_fork_count:
            raise Invalid("invalid_request",
                f"count {count} is above the limit of {self.settings.max_fork_count} "
                "(K3STACK_SANDBOX__MAX_FORK_COUNT)",
            )  # fmt: skip
        with self._lock(sandbox_id):
            with self.db.session() as s:
                src = self._row(s, sandbox_id)
                state, runtime_name = src.state, src.runtime
                head = src.head_checkpoint_id
            rt = self.runtimes.get(runtime_name)
            if rt is None:
                raise Unavailable("runtime_unavailable", f"runtime {runtime_name!r} is gone")
            if memory and not rt.capabilities.memory_checkpoint:
                raise Conflict("unsupported",
                    f"runtime {rt.name!r} cannot fork memory: its checkpoints hold files only "
                    "(pass memory=false to fork the filesystem)",
                )  # fmt: skip
            if not rt.capabilities.fork:
                raise Conflict("unsupported", f"runtime {rt.name!r} cannot fork")
            if state == "running":
                ck_id = self._take_checkpoint(sandbox_id, "fork").id
            elif state == "paused" and head:
                ck_id = head  # a paused sandbox's state is its head checkpoint: no need to touch it
            else:
                raise Conflict("not_running", f"sandbox {sandbox_id!r} is {state}")
            self.gc.hold([ck_id])  # until the children's rows name it (the source may be killed)
        try:
            chain, children = self._fork_rows(sandbox_id, ck_id, count, timeout)
        finally:
            self.gc.release([ck_id])

        def one(child_id: str) -> Sandbox | SandboxError:
            try:
                with self._lock(child_id):
                    with runtime_errors(child_id), self.gc.gate.shared():
                        handle = rt.restore(child_id, chain, self.store, self.workdir(child_id))
                    return self._went_running(child_id, handle, rt)
            except SandboxError as exc:
                self._set_error(child_id, exc.message)
                shutil.rmtree(self.workdir(child_id), ignore_errors=True)
                return exc
            except Exception as exc:  # noqa: BLE001 - one child's failure is reported, not raised
                log.exception("fork child %s", child_id)
                self._set_error(child_id, str(exc))
                return Internal("runtime_error", str(exc))

        with ThreadPoolExecutor(min(count, 4), thread_name_prefix="k3stack-fork") as pool:
            return list(pool.map(one, children))

    def _fork_rows(
        self, sandbox_id: str, ck_id: str, count: int, timeout: int | None
    ) -> tuple[list[CheckpointManifest], list[str]]:
        """The fork checkpoint's chain and ``count`` new child rows (state ``creating``)."""
        chain = self._chain(ck_id)
        with self.db.session() as s:
            src = self._row(s, sandbox_id)
            children = []
            now = self.clock()
            for _ in range(count):
                child_id = f"sbx-{secrets.token_hex(8)}"
                children.append(child_id)
                s.add(
                    SandboxRow(
                        id=child_id, template_id=src.template_id, runtime=src.runtime,
                        state="creating", cpu_count=src.cpu_count, memory_mb=src.memory_mb,
                        timeout_s=src.timeout_s if timeout is None else timeout,
                        on_timeout=src.on_timeout, metadata_=dict(src.metadata_ or {}),
                        env_vars=dict(src.env_vars or {}), network=dict(src.network or {}),
                        created_at=now, started_at=now, end_at=None, updated_at=now,
                        head_checkpoint_id=ck_id, forked_from=ck_id,
                    )
                )  # fmt: skip
        return chain, children

    # ------------------------------------------------------------------ garbage collection (GarbageCollector)

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        self.gc.delete_checkpoint(checkpoint_id)

    def collect_garbage(self, grace_s: float | None = None) -> GCReport:
        return self.gc.collect_garbage(grace_s)

    # ------------------------------------------------------------------ background work (Reaper)

    def tick(self) -> dict[str, list[str]]:
        """One reaper pass now (see :class:`~services.sandbox.lifecycle.reaper.Reaper`)."""
        return self.reaper.tick()

    # ------------------------------------------------------------------ templates (TemplateCatalog)

    def list_templates(self) -> list[Template]:
        return self.templates.list()

    def get_template(self, template_id: str) -> Template:
        return self.templates.get(template_id)

    def build_template(self, req: NewTemplate) -> Template:
        return self.templates.build(req)

    def delete_template(self, template_id: str) -> None:
        self.templates.delete(template_id)

    # ------------------------------------------------------------------ invariants

    def check_invariants(self) -> None:
        """Assert the invariants in the module docstring (tests call this)."""
        with self.db.session() as s:
            rows = s.scalars(select(SandboxRow)).all()
            for row in rows:
                running = row.state == "running"
                assert running == (row.id in self._live), (
                    f"sandbox {row.id} is {row.state} but live={row.id in self._live}"
                )
                if row.state == "paused":
                    assert row.head_checkpoint_id, f"paused sandbox {row.id} has no checkpoint"
                    cur: str | None = row.head_checkpoint_id
                    while cur:
                        ck = s.get(CheckpointRow, cur)
                        assert ck is not None, f"checkpoint {cur} of {row.id} missing in SQL"
                        assert self.store.exists(ck.manifest_key), f"manifest of {cur} missing"
                        cur = ck.parent_id
