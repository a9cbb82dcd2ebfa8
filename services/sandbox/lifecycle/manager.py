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

import contextlib
import logging
import secrets
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select

from services.sandbox.lifecycle.runtimes import RUNTIME_ORDER, pick_runtime
from services.sandbox.models import CheckpointRow, SandboxRow, TemplateRow
from services.sandbox.runtime.base import (
    CheckpointError,
    CheckpointManifest,
    ExecRequest,
    FileInfo,
    GuestAgentError,
    GuestFileError,
    GuestFileNotFound,
    GuestFileTooLarge,
    GuestPathError,
    NetworkPolicy,
    Runtime,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxRuntimeError,
    SandboxSpec,
    UnsupportedOperation,
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
    SandboxForkResult,
    Template,
    TemplateStep,
)
from shared.db import ServiceDatabase
from shared.errors import APIError, Error, not_found
from shared.netguard import check_allowlist
from shared.objectstore import ObjectStore
from shared.settings import SandboxSettings, get_settings

log = logging.getLogger("k3stack.sandbox")

BUILTIN_TEMPLATES = ("busybox", "debian")
MANIFEST_PREFIX = "sandbox/manifests/"


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(dt: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything here is UTC."""
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


def _deployed_fence(runtime: str, allow: list[str], sandbox: SandboxSettings) -> None:
    """Deployed mode: no `process` runtime unless enabled, no internal allowlist destinations."""
    if get_settings().mode != "deployed":
        return
    if runtime == "process" and not sandbox.allow_process_runtime:
        raise APIError(
            409, "unsupported",
            "runtime 'process' is not a security boundary and is off in deployed mode "
            "(K3STACK_SANDBOX__ALLOW_PROCESS_RUNTIME=true enables it)",
        )  # fmt: skip
    refused = check_allowlist(allow, deployed=True)
    if refused:
        raise APIError(400, "invalid_request", refused)


@contextmanager
def runtime_errors(sandbox_id: str = "") -> Iterator[None]:
    """Turn runtime exceptions into the API's errors (see ``runtime.base`` for the mapping)."""
    try:
        yield
    except APIError:
        raise
    except GuestPathError as exc:
        raise APIError(400, "invalid_path", str(exc)) from exc
    except GuestFileNotFound as exc:
        raise APIError(404, "file_not_found", str(exc)) from exc
    except GuestFileTooLarge as exc:
        raise APIError(413, "too_large", str(exc)) from exc
    except GuestFileError as exc:
        status = 409 if exc.errno in (17, 21, 20, 39) else 400  # EEXIST EISDIR ENOTDIR ENOTEMPTY
        raise APIError(status, "file_error", str(exc)) from exc
    except UnsupportedOperation as exc:
        raise APIError(409, "unsupported", str(exc)) from exc
    except SandboxNotRunning as exc:
        raise APIError(409, "not_running", str(exc)) from exc
    except RuntimeUnavailable as exc:
        raise APIError(503, "runtime_unavailable", str(exc)) from exc
    except (GuestAgentError, CheckpointError) as exc:
        where = f" (sandbox {sandbox_id})" if sandbox_id else ""
        log.exception("runtime failure%s", where)
        raise APIError(500, "runtime_error", f"{exc}{where}") from exc


class _Gate:
    """Readers-writer gate: checkpoints and restores share it, garbage collection holds it
    alone (a checkpoint deduplicating against an object the sweep is deleting would name a
    deleted object). Writers go first once waiting, so a busy service cannot starve the GC."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


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
        self._builds = ThreadPoolExecutor(2, thread_name_prefix="k3stack-template")
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self._gate = _Gate()
        self._holds: Counter[str] = Counter()
        self._holds_lock = threading.Lock()
        self._last_gc = clock()

    # ------------------------------------------------------------------ start / stop

    def start(self, background: bool = True) -> None:
        """Seed built-in templates, adopt or recover sandboxes, start the reaper thread."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._seed_templates()
        self.recover()
        if background:
            self._reaper = threading.Thread(
                target=self._reap_loop, name="k3stack-reaper", daemon=True
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
        self._builds.shutdown(wait=True, cancel_futures=False)
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
            raise not_found("sandbox", sandbox_id)
        if row.state == "killed":
            raise APIError(404, "not_found", f"sandbox {sandbox_id!r} was killed")
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
        template = self._ready_template(req.templateID)
        requested = req.runtime
        if template.runtime != "any":
            if requested not in (None, "auto", template.runtime):
                raise APIError(
                    400, "invalid_request",
                    f"template {template.id!r} is built for runtime {template.runtime!r}, "
                    f"not {requested!r}",
                )  # fmt: skip
            requested = template.runtime
        with runtime_errors():
            rt = pick_runtime(requested, self.settings.runtime, self.runtimes)
        _deployed_fence(rt.name, req.network.allow, self.settings)
        if req.network.mode == "allowlist" and not rt.capabilities.network_allowlist:
            raise APIError(
                409, "unsupported",
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
            except APIError as exc:
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
            raise APIError(
                409, "sandbox_paused",
                f"sandbox {sandbox_id!r} is paused; resume it first "
                f"(POST /sandboxes/{sandbox_id}/resume or /connect)",
            )  # fmt: skip
        if state == "creating":
            raise APIError(409, "not_running", f"sandbox {sandbox_id!r} is still being created")
        raise APIError(409, "not_running", f"sandbox {sandbox_id!r} is in state {state!r}: {err}")

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
            raise APIError(
                400, "invalid_request",
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
            raise APIError(400, "invalid_path", str(exc)) from exc
        except ValueError as exc:
            raise APIError(400, "invalid_request", str(exc).split("\n", 1)[-1].strip()) from exc

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
            raise APIError(400, "invalid_path", str(exc)) from exc

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
                raise not_found("checkpoint", checkpoint_id)
            key = row.manifest_key
        try:
            return CheckpointManifest.model_validate_json(self.store.get(key))
        except KeyError as exc:
            raise APIError(
                500, "checkpoint_missing", f"manifest of checkpoint {checkpoint_id} is gone: {exc}"
            ) from exc

    def _take_checkpoint(
        self, sandbox_id: str, kind: str, name: str | None = None
    ) -> CheckpointRow:
        """Checkpoint a running sandbox (caller holds its lock); it keeps running."""
        live = self._require_running(sandbox_id)
        with self._gate.shared():
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
                raise not_found("sandbox", sandbox_id)
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
                raise not_found("checkpoint", checkpoint_id)
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
                        raise not_found("checkpoint", checkpoint_id)
                    raise APIError(500, "checkpoint_missing", f"ancestor {cur} is missing")
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
                raise APIError(
                    409, "not_running", f"sandbox {sandbox_id!r} is {state}, not running"
                )
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
                    raise APIError(409, "already_running", f"sandbox {sandbox_id!r} is running")
                if row.state != "paused" or not row.head_checkpoint_id:
                    raise APIError(
                        409, "not_paused",
                        f"sandbox {sandbox_id!r} is {row.state} and has nothing to resume from",
                    )  # fmt: skip
                head, runtime_name = row.head_checkpoint_id, row.runtime
                if auto_pause is not None:
                    row.on_timeout = "pause" if auto_pause else "kill"
            rt = self.runtimes.get(runtime_name)
            if rt is None:
                raise APIError(503, "runtime_unavailable", f"runtime {runtime_name!r} is gone")
            with self._holding([head]), self._gate.shared():
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
                raise APIError(409, "not_running", f"sandbox {sandbox_id!r} is {row.state}")
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
                raise not_found("checkpoint", checkpoint_id)
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
        with self._lock(sandbox_id), self._holding([checkpoint_id]):
            with self.db.session() as s:
                row = self._row(s, sandbox_id)
                runtime_name = row.runtime
            if not self._in_history(sandbox_id, checkpoint_id):
                raise APIError(
                    409, "foreign_checkpoint",
                    f"checkpoint {checkpoint_id!r} is not in the history of sandbox "
                    f"{sandbox_id!r}; fork its sandbox instead",
                )  # fmt: skip
            rt = self.runtimes.get(runtime_name)
            if rt is None:
                raise APIError(503, "runtime_unavailable", f"runtime {runtime_name!r} is gone")
            chain = self._chain(checkpoint_id)
            live = self._live.pop(sandbox_id, None)
            if live is not None:
                with runtime_errors(sandbox_id):
                    live.runtime.destroy(live.handle)
            shutil.rmtree(self.workdir(sandbox_id), ignore_errors=True)
            try:
                with runtime_errors(sandbox_id), self._gate.shared():
                    handle = rt.restore(sandbox_id, chain, self.store, self.workdir(sandbox_id))
            except APIError as exc:
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
    ) -> list[SandboxForkResult]:
        if count > self.settings.max_fork_count:
            raise APIError(
                400, "invalid_request",
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
                raise APIError(503, "runtime_unavailable", f"runtime {runtime_name!r} is gone")
            if memory and not rt.capabilities.memory_checkpoint:
                raise APIError(
                    409, "unsupported",
                    f"runtime {rt.name!r} cannot fork memory: its checkpoints hold files only "
                    "(pass memory=false to fork the filesystem)",
                )  # fmt: skip
            if not rt.capabilities.fork:
                raise APIError(409, "unsupported", f"runtime {rt.name!r} cannot fork")
            if state == "running":
                ck_id = self._take_checkpoint(sandbox_id, "fork").id
            elif state == "paused" and head:
                ck_id = head  # a paused sandbox's state is its head checkpoint: no need to touch it
            else:
                raise APIError(409, "not_running", f"sandbox {sandbox_id!r} is {state}")
            self._hold([ck_id])  # until the children's rows name it (the source may be killed)
        try:
            chain, children = self._fork_rows(sandbox_id, ck_id, count, timeout)
        finally:
            self._release([ck_id])

        def one(child_id: str) -> SandboxForkResult:
            try:
                with self._lock(child_id):
                    with runtime_errors(child_id), self._gate.shared():
                        handle = rt.restore(child_id, chain, self.store, self.workdir(child_id))
                    return SandboxForkResult(sandbox=self._went_running(child_id, handle, rt))
            except APIError as exc:
                self._set_error(child_id, exc.message)
                shutil.rmtree(self.workdir(child_id), ignore_errors=True)
                return SandboxForkResult(error=exc.to_error())
            except Exception as exc:  # noqa: BLE001 - one child's failure is reported, not raised
                log.exception("fork child %s", child_id)
                self._set_error(child_id, str(exc))
                return SandboxForkResult(
                    error=Error(code=500, error_code="runtime_error", message=str(exc))
                )

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

    # ------------------------------------------------------------------ garbage collection

    def _hold(self, checkpoint_ids: Iterable[str]) -> None:
        with self._holds_lock:
            self._holds.update(checkpoint_ids)

    def _release(self, checkpoint_ids: Iterable[str]) -> None:
        with self._holds_lock:
            self._holds.subtract(checkpoint_ids)
            self._holds += Counter()  # drop zero counts

    @contextmanager
    def _holding(self, checkpoint_ids: list[str]) -> Iterator[None]:
        """Keep these checkpoints (and their ancestors) alive while an operation uses them:
        DELETE /checkpoints refuses them, the GC counts them as reachable."""
        self._hold(checkpoint_ids)
        try:
            yield
        finally:
            self._release(checkpoint_ids)

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Delete a checkpoint nothing depends on (its objects go at the next GC).

        409 when it is the head of a sandbox that is not killed (resume/restore needs it), the
        parent of another checkpoint, the fork source of a sandbox that is not killed, or in use
        by an operation in flight."""
        with self._holds_lock, self.db.session() as s:
            row = s.get(CheckpointRow, checkpoint_id)
            if row is None:
                raise not_found("checkpoint", checkpoint_id)
            if self._holds.get(checkpoint_id):
                raise APIError(
                    409, "checkpoint_in_use",
                    f"checkpoint {checkpoint_id!r} is in use by an operation in flight",
                )  # fmt: skip
            user = s.scalars(
                select(SandboxRow).where(
                    SandboxRow.state != "killed",
                    (SandboxRow.head_checkpoint_id == checkpoint_id)
                    | (SandboxRow.forked_from == checkpoint_id),
                )
            ).first()
            if user is not None:
                what = "head" if user.head_checkpoint_id == checkpoint_id else "fork source"
                raise APIError(
                    409, "checkpoint_in_use",
                    f"checkpoint {checkpoint_id!r} is the {what} of sandbox {user.id!r} "
                    f"({user.state}); kill that sandbox first",
                )  # fmt: skip
            child = s.scalars(
                select(CheckpointRow.id).where(CheckpointRow.parent_id == checkpoint_id)
            ).first()
            if child is not None:
                raise APIError(
                    409, "checkpoint_in_use",
                    f"checkpoint {checkpoint_id!r} is the parent of checkpoint {child!r}",
                )  # fmt: skip
            s.delete(row)
        log.info("checkpoint %s deleted", checkpoint_id)

    def collect_garbage(self, grace_s: float | None = None) -> GCReport:
        """Mark and sweep: delete what no live sandbox can need any more.

        Mark: roots are every checkpoint of a sandbox that is not killed (restore may go to
        any of them), every sandbox's head and fork source, and the checkpoints operations in
        flight hold; reachable = the roots and all their ancestors (a fork child's chain goes
        through its source's checkpoints, so those live while the child does). Checkpoint rows
        not reachable (only killed sandboxes had them) are deleted. Every object key the
        reachable manifests reference is kept.

        Sweep: objects under the manifest prefix and the runtimes' ``object_prefixes`` that are
        not kept and older than ``grace_s`` (default ``gc_grace_s``) are deleted; so are cached
        local disk layers nothing references and workdirs of killed sandboxes. Runs with
        checkpoints and restores held off (see :class:`_Gate`); content-addressed objects
        (deduplicated pages, blobs, disk layers) live while any reachable manifest names them.
        """
        grace = self.settings.gc_grace_s if grace_s is None else grace_s
        t0 = time.perf_counter()
        with self._gate.exclusive():
            report = self._collect(grace)
        report.duration_ms = round((time.perf_counter() - t0) * 1000, 1)
        log.info(
            "sandbox gc: %d checkpoints kept, %d deleted; %d/%d objects deleted (%d bytes), "
            "%d in grace; %d local files (%d bytes); %d missing; %.0f ms",
            report.checkpoints_reachable, report.checkpoints_deleted, report.objects_deleted,
            report.objects_scanned, report.bytes_freed, report.objects_in_grace,
            report.local_files_deleted, report.local_bytes_freed, len(report.missing_objects),
            report.duration_ms,
        )  # fmt: skip
        return report

    def _collect(self, grace: float) -> GCReport:
        report = GCReport(
            checkpoints_reachable=0, checkpoints_deleted=0, objects_scanned=0,
            objects_deleted=0, bytes_freed=0, objects_in_grace=0, local_files_deleted=0,
            local_bytes_freed=0, duration_ms=0.0,
        )  # fmt: skip
        # ---- mark: checkpoints
        with self.db.session() as s:
            sandboxes = {r.id: r.state for r in s.scalars(select(SandboxRow)).all()}
            with self._holds_lock:
                roots = set(self._holds)
            for row in s.scalars(select(SandboxRow).where(SandboxRow.state != "killed")).all():
                roots.update(c for c in (row.head_checkpoint_id, row.forked_from) if c)
            cks = {
                c.id: (c.parent_id, c.manifest_key, c.runtime, c.sandbox_id)
                for c in s.scalars(select(CheckpointRow)).all()
            }
        roots.update(
            cid for cid, (_, _, _, sbx) in cks.items() if sandboxes.get(sbx, "killed") != "killed"
        )
        reachable: set[str] = set()
        for root in roots:
            cur: str | None = root
            while cur is not None and cur in cks and cur not in reachable:
                reachable.add(cur)
                cur = cks[cur][0]
        garbage = [cid for cid in cks if cid not in reachable]
        if garbage:
            # children before parents, so no batch leaves a row naming a deleted parent
            depth: dict[str, int] = {}

            def depth_of(cid: str) -> int:
                chain = []
                cur: str | None = cid
                while cur is not None and cur in cks and cur not in depth:
                    chain.append(cur)
                    cur = cks[cur][0]
                d = depth.get(cur, -1) if cur is not None else -1
                for c in reversed(chain):
                    d += 1
                    depth[c] = d
                return depth[cid]

            garbage.sort(key=depth_of, reverse=True)
            for i in range(0, len(garbage), 500):
                with self.db.session() as s:
                    s.execute(
                        delete(CheckpointRow).where(CheckpointRow.id.in_(garbage[i : i + 500]))
                    )
        report.checkpoints_reachable = len(reachable)
        report.checkpoints_deleted = len(garbage)
        # ---- mark: objects
        keep: set[str] = set()
        missing: list[str] = []
        for cid in reachable:
            _, manifest_key, runtime_name, _ = cks[cid]
            keep.add(manifest_key)
            try:
                m = CheckpointManifest.model_validate_json(self.store.get(manifest_key))
            except KeyError:
                missing.append(manifest_key)
                continue
            rt = self.runtimes.get(runtime_name)
            if rt is None:
                continue  # its prefixes are not swept either
            try:
                keep.update(rt.referenced_keys(m, self.store))
            except KeyError as exc:  # a broken checkpoint: what it names is unknowable
                missing.append(str(exc.args[0] if exc.args else exc))
        report.missing_objects = sorted(missing)[:20]
        # ---- sweep: objects
        prefixes = [MANIFEST_PREFIX]
        for rt in self.runtimes.values():
            prefixes += [p for p in rt.object_prefixes if p not in prefixes]
        cutoff = datetime.now(UTC) - timedelta(seconds=grace)
        deleted: set[str] = set()
        for prefix in prefixes:
            for info in list(self.store.list(prefix)):
                report.objects_scanned += 1
                if info.key in keep:
                    continue
                if _aware(info.modified) > cutoff:  # type: ignore[operator]
                    report.objects_in_grace += 1
                    continue
                try:
                    self.store.delete(info.key)
                except KeyError:
                    continue
                deleted.add(info.key)
                report.bytes_freed += info.size
        report.objects_deleted = len(deleted)
        # ---- sweep: local files
        for rt in self.runtimes.values():
            if deleted:
                rt.forget_objects(deleted)
            files, freed = rt.collect_local(keep, grace)
            report.local_files_deleted += files
            report.local_bytes_freed += freed
        vms = self.data_dir / "vms"
        if vms.is_dir():
            wall = time.time()
            for wd in vms.iterdir():
                if sandboxes.get(wd.name, "killed") != "killed" or wd.name in self._live:
                    continue
                try:
                    if wall - wd.stat().st_mtime < grace:
                        continue
                except FileNotFoundError:
                    continue
                with self.db.session() as s:  # created since the snapshot above? (row first)
                    row = s.get(SandboxRow, wd.name)
                    if row is not None and row.state != "killed":
                        continue
                size = 0
                for f in wd.rglob("*"):
                    with contextlib.suppress(OSError):
                        size += f.lstat().st_size if f.is_file() else 0
                shutil.rmtree(wd, ignore_errors=True)
                report.local_files_deleted += 1
                report.local_bytes_freed += size
        return report

    # ------------------------------------------------------------------ background work

    def _reap_loop(self) -> None:
        while not self._stop.wait(self.settings.reaper_interval_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the reaper must outlive one bad tick
                log.exception("sandbox reaper tick failed")

    def tick(self) -> dict[str, list[str]]:
        """One pass of timeouts, periodic snapshots and liveness (and, every ``gc_interval_s``,
        garbage collection). Returns what it did."""
        done = self._tick()
        every = self.settings.gc_interval_s
        now = self.clock()
        if every > 0 and (now - self._last_gc).total_seconds() >= every:
            self._last_gc = now
            try:
                self.collect_garbage()
            except Exception:  # noqa: BLE001 - the next interval tries again
                log.exception("sandbox gc failed")
        return done

    def _tick(self) -> dict[str, list[str]]:
        done: dict[str, list[str]] = {"paused": [], "killed": [], "snapshots": [], "lost": []}
        now = self.clock()
        interval = self.settings.snapshot_interval_s
        for sandbox_id in list(self._live):
            lock = self._lock(sandbox_id)
            if not lock.acquire(blocking=False):
                continue  # busy with a lifecycle operation; next tick
            try:
                live = self._live.get(sandbox_id)
                if live is None:
                    continue
                if not live.runtime.is_alive(live.handle):
                    self._live.pop(sandbox_id, None)
                    self._stop_quietly(live.runtime, live.handle)  # memory file, sockets
                    with self.db.session() as s:
                        row = s.get(SandboxRow, sandbox_id)
                        if row is not None:
                            self._mark_lost(row, "the sandbox's VM exited unexpectedly")
                    done["lost"].append(sandbox_id)
                    continue
                if live.end_at is not None and now >= live.end_at:
                    with self.db.session() as s:
                        action = s.get(SandboxRow, sandbox_id).on_timeout  # type: ignore[union-attr]
                    try:
                        if action == "pause":
                            self.pause(sandbox_id, reason="timeout")
                            done["paused"].append(sandbox_id)
                        else:
                            self.kill(sandbox_id)
                            done["killed"].append(sandbox_id)
                    except APIError as exc:
                        log.error(
                            "timeout %s of sandbox %s failed: %s", action, sandbox_id, exc.message
                        )
                    continue
                if interval > 0:
                    with self.db.session() as s:
                        row = s.get(SandboxRow, sandbox_id)
                        last = _aware(row.last_snapshot_at or row.started_at) if row else now
                    if last is not None and (now - last).total_seconds() >= interval:
                        try:
                            self._take_checkpoint(sandbox_id, "periodic")
                            done["snapshots"].append(sandbox_id)
                        except APIError as exc:
                            log.error("periodic snapshot of %s failed: %s", sandbox_id, exc.message)
            finally:
                lock.release()
        return done

    # ------------------------------------------------------------------ templates

    def _seed_templates(self) -> None:
        now = self.clock()
        with self.db.session() as s:
            for name in BUILTIN_TEMPLATES:
                if s.get(TemplateRow, name) is None:
                    s.add(
                        TemplateRow(
                            id=name, runtime="any", base=None, steps=[], status="ready",
                            builtin=True, cpu_count=1, memory_mb=256, created_at=now,
                            updated_at=now, spawn_count=0, logs=[], error=None, image={},
                        )
                    )  # fmt: skip

    def _ready_template(self, template_id: str) -> TemplateRow:
        with self.db.session() as s:
            row = s.get(TemplateRow, template_id)
            if row is None:
                raise not_found("template", template_id)
            if row.status != "ready":
                raise APIError(
                    409, "template_not_ready",
                    f"template {template_id!r} is {row.status}"
                    + (f": {row.error}" if row.error else ""),
                )  # fmt: skip
            s.expunge(row)
            return row

    @staticmethod
    def _template_view(row: TemplateRow) -> Template:
        return Template(
            templateID=row.id, runtime=row.runtime,
            buildStatus=row.status,  # type: ignore[arg-type]
            builtin=row.builtin, fromTemplate=row.base,
            steps=[TemplateStep.model_validate(x) for x in row.steps or []],
            cpuCount=row.cpu_count, memoryMB=row.memory_mb,
            createdAt=_aware(row.created_at),  # type: ignore[arg-type]
            updatedAt=_aware(row.updated_at),  # type: ignore[arg-type]
            spawnCount=row.spawn_count, logs=list(row.logs or [])[-200:], error=row.error,
        )  # fmt: skip

    def list_templates(self) -> list[Template]:
        with self.db.session() as s:
            rows = s.scalars(select(TemplateRow).order_by(TemplateRow.created_at)).all()
            return [self._template_view(r) for r in rows]

    def get_template(self, template_id: str) -> Template:
        with self.db.session() as s:
            row = s.get(TemplateRow, template_id)
            if row is None:
                raise not_found("template", template_id)
            return self._template_view(row)

    def build_template(self, req: NewTemplate) -> Template:
        """Record the template and build it in the background; poll ``GET /templates/{id}``."""
        base = req.fromTemplate or "busybox"
        base_row = self._ready_template(base)
        requested = req.runtime
        if base_row.runtime != "any":
            requested = base_row.runtime
        with runtime_errors():
            rt = pick_runtime(requested, self.settings.runtime, self.runtimes)
        builder = getattr(rt, "build_image", None)
        if builder is None:
            raise APIError(409, "unsupported", f"runtime {rt.name!r} has no image builder")
        now = self.clock()
        with self.db.session() as s:
            existing = s.get(TemplateRow, req.name)
            if existing is not None:
                if existing.builtin or existing.status == "building":
                    raise APIError(
                        409, "conflict", f"template {req.name!r} is {'built-in' if existing.builtin else 'building'}"
                    )  # fmt: skip
                s.delete(existing)
                s.flush()
            s.add(
                TemplateRow(
                    id=req.name, runtime=rt.name, base=base,
                    steps=[st.model_dump() for st in req.steps], status="building",
                    builtin=False, cpu_count=req.cpuCount, memory_mb=req.memoryMB,
                    created_at=now, updated_at=now, spawn_count=0, logs=[], error=None, image={},
                )
            )  # fmt: skip
        self._builds.submit(
            self._run_build, req.name, rt, base, [st.model_dump() for st in req.steps]
        )
        return self.get_template(req.name)

    def _run_build(self, name: str, rt: Runtime, base: str, steps: list[dict[str, Any]]) -> None:
        lines: list[str] = []
        last_flush = [time.monotonic()]

        def say(line: str) -> None:
            lines.append(line)
            if time.monotonic() - last_flush[0] > 0.5:
                last_flush[0] = time.monotonic()
                with self.db.session() as s:
                    row = s.get(TemplateRow, name)
                    if row is not None:
                        row.logs = lines[-500:]

        try:
            image = rt.build_image(name, base, steps, say)  # type: ignore[attr-defined]
            status, error = "ready", None
        except Exception as exc:  # noqa: BLE001 - a failed build is a template in state error
            log.warning("template %s failed: %s", name, exc)
            image, status, error = {}, "error", str(exc)
        with self.db.session() as s:
            row = s.get(TemplateRow, name)
            if row is not None:
                row.status, row.error, row.image = status, error, image or {}
                row.logs = lines[-500:]
                row.updated_at = self.clock()

    def delete_template(self, template_id: str) -> None:
        with self.db.session() as s:
            row = s.get(TemplateRow, template_id)
            if row is None:
                raise not_found("template", template_id)
            if row.builtin:
                raise APIError(409, "conflict", f"template {template_id!r} is built in")
            if row.status == "building":
                raise APIError(409, "conflict", f"template {template_id!r} is still building")
            users = s.scalars(
                select(SandboxRow.id).where(
                    SandboxRow.template_id == template_id,
                    SandboxRow.state.in_(("running", "paused", "creating")),
                )
            ).all()
            if users:
                raise APIError(
                    409, "conflict",
                    f"template {template_id!r} is used by {len(users)} sandbox(es), e.g. {users[0]}",
                )  # fmt: skip
            rt = self.runtimes.get(row.runtime)
            s.delete(row)
        deleter = getattr(rt, "delete_image", None) if rt else None
        if deleter is not None:
            deleter(template_id)

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
