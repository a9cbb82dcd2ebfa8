"""Sandbox lifecycle: create, kill, pause (checkpoint + stop), resume (restore of the head
checkpoint into the same workdir), connect, timeouts, and recovery of the live set after a
(re)start. Policy only; runtimes do the mechanism.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from datetime import timedelta

from sqlalchemy import select

from services.sandbox.lifecycle.checkpoints import CheckpointGraph
from services.sandbox.lifecycle.errors import Conflict, Invalid, SandboxError, runtime_errors
from services.sandbox.lifecycle.gc import GarbageCollector
from services.sandbox.lifecycle.runtimes import pick_runtime
from services.sandbox.lifecycle.state import Live, SandboxState
from services.sandbox.lifecycle.templates import TemplateCatalog
from services.sandbox.lifecycle.views import aware, checkpoint_view, detail, summary
from services.sandbox.models import SandboxRow, TemplateRow
from services.sandbox.runtime.base import Runtime, SandboxRuntimeError, SandboxSpec, VMHandle
from shared.contracts.sandbox import Checkpoint, NetworkPolicy, NewSandbox, Sandbox, SandboxDetail
from shared.netguard import pin_allowlist

log = logging.getLogger("k3stack.sandbox")


class SandboxLifecycle:
    """Create, kill, pause, resume, timeouts and recovery over the shared state.

    ``deployed``: the service runs in deployed mode (no ``process`` runtime unless the
    settings allow it, no internal allowlist destinations).
    """

    def __init__(
        self, state: SandboxState, graph: CheckpointGraph, gc: GarbageCollector,
        templates: TemplateCatalog, deployed: bool = False,
    ) -> None:  # fmt: skip
        self.st = state
        self.graph = graph
        self.gc = gc
        self.templates = templates
        self.deployed = deployed

    # ------------------------------------------------------------------ views

    def _detail(self, row: SandboxRow) -> SandboxDetail:
        live = self.st.live.get(row.id)
        rt = self.st.runtimes.get(row.runtime)
        return detail(row, rt, live.end_at if live else None, live is not None)

    def get(self, sandbox_id: str) -> SandboxDetail:
        with self.st.db.session() as s:
            return self._detail(self.st.row(s, sandbox_id))

    def list(
        self, states: list[str] | None = None, metadata: dict[str, str] | None = None
    ) -> list[SandboxDetail]:
        wanted = states or ["running", "paused"]
        with self.st.db.session() as s:
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

    # ------------------------------------------------------------------ recovery

    def recover(self) -> None:
        """Rebuild the live set from SQL after a (re)start.

        Running rows whose VM is still alive are adopted (the runtime reconnects to the VM
        and its agent); the others — VM gone, or alive but not adoptable (then it is stopped
        first, so nothing is left running or mapped) — become ``paused`` at their last
        checkpoint (periodic snapshots bound what is lost) or ``error`` when they have none,
        with the reason in ``error``. Rows caught ``creating`` are stopped the same way.
        Paused rows need nothing (resume restores them from the store), except a frozen one
        (docker): kept paused while its container is there and frozen, else stopped and left
        to resume from its pause checkpoint, with the reason.
        """
        st = self.st
        self._recover_frozen()
        with st.db.session() as s:
            rows = s.scalars(
                select(SandboxRow).where(SandboxRow.state.in_(("running", "creating")))
            ).all()
            for row in rows:
                rt = st.runtimes.get(row.runtime)
                handle = VMHandle.model_validate(row.handle) if row.handle else None
                alive = bool(rt and handle and rt.is_alive(handle))
                if row.state == "running" and alive and rt.adopt(handle):  # type: ignore[union-attr, arg-type]
                    st.live[row.id] = Live(handle, rt, aware(row.end_at))  # type: ignore[arg-type]
                    log.info("sandbox %s: re-attached to its VM after a restart", row.id)
                    continue
                if rt is not None and handle is not None:
                    st.stop_quietly(rt, handle)
                why = (
                    "the service restarted and could not re-attach to the sandbox's VM (stopped)"
                    if alive
                    else "the service restarted and the sandbox's VM was gone"
                )
                st.mark_lost(row, why)
        self._reap_orphans()

    def _reap_orphans(self) -> None:
        """Let each runtime end what a previous run of this instance left that was not
        re-attached above (warm-pool QEMUs, containers, pause images, memory files...)."""
        st = self.st
        with st.db.session() as s:
            frozen = s.execute(
                select(SandboxRow.runtime, SandboxRow.handle).where(SandboxRow.state == "paused")
            ).all()
        checkpoints = self.gc.restorable()
        for name, rt in st.runtimes.items():
            keep = [live.handle for live in st.live.values() if live.runtime is rt]
            keep += [VMHandle.model_validate(h) for r, h in frozen if r == name and h]
            try:
                done = rt.reap_orphans(keep, checkpoints)
            except Exception:  # noqa: BLE001 - one runtime's failure must not stop the start
                log.exception("runtime %s: reaping what a previous run left failed", name)
                continue
            if any(done.values()):
                log.warning("runtime %s: reaped what a previous run left: %s", name, done)

    def _recover_frozen(self) -> None:
        self._unfreeze_rows(
            "the service restarted and the paused sandbox's frozen container was gone",
            keep=True,
        )

    def stop_frozen(self) -> None:
        """At shutdown: stop every frozen sandbox (nothing the service started outlives it);
        each resumes from its pause checkpoint, and its row says so."""
        self._unfreeze_rows("the service stopped and ended the paused sandbox's frozen container")

    def _unfreeze_rows(self, why: str, keep: bool = False) -> None:
        """Paused rows holding a frozen sandbox's handle: kept if ``keep`` and it is still
        frozen, else stopped and left to their pause checkpoint, with the reason."""
        st = self.st
        with st.db.session() as s:
            for row in s.scalars(select(SandboxRow).where(SandboxRow.state == "paused")).all():
                if not row.handle:
                    continue
                rt = st.runtimes.get(row.runtime)
                handle = VMHandle.model_validate(row.handle)
                if keep and rt is not None and rt.is_frozen(handle):
                    log.info("sandbox %s: re-attached, frozen, after a restart", row.id)
                    continue
                if rt is not None:
                    st.stop_quietly(rt, handle)
                row.handle = None
                row.error = (
                    f"{why} at {st.clock().isoformat()}; resume restores checkpoint "
                    f"{row.head_checkpoint_id} (files only)"
                )
                log.warning("sandbox %s: %s", row.id, row.error)

    # ------------------------------------------------------------------ create / kill

    def _fence(self, runtime: str, network: NetworkPolicy) -> None:
        """Deployed mode: no `process` runtime unless enabled, no internal allowlist destinations;
        each destination's checked address is pinned for the runtime to dial (no second lookup)."""
        if not self.deployed:
            return
        if runtime == "process" and not self.st.settings.allow_process_runtime:
            raise Conflict(
                "unsupported",
                "runtime 'process' is not a security boundary and is off in deployed mode "
                "(K3STACK_SANDBOX__ALLOW_PROCESS_RUNTIME=true enables it)",
            )  # fmt: skip
        pins, refused = pin_allowlist(network.allow)
        if refused:
            raise Invalid("invalid_request", refused)
        network.pin(pins)

    def create(self, req: NewSandbox) -> Sandbox:
        st = self.st
        settings = st.settings
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
            rt = pick_runtime(requested, settings.runtime, st.runtimes)
        self._fence(rt.name, req.network)
        if req.network.mode == "allowlist" and not rt.capabilities.network_allowlist:
            raise Conflict("unsupported",
                f"runtime {rt.name!r} cannot restrict the network to an allowlist",
            )  # fmt: skip
        sandbox_id = f"sbx-{secrets.token_hex(8)}"
        now = st.clock()
        timeout = settings.default_timeout_s if req.timeout is None else req.timeout
        on_timeout = (
            settings.timeout_action
            if req.autoPause is None
            else ("pause" if req.autoPause else "kill")
        )
        env = {**(template.image or {}).get("env", {}), **req.envVars}
        spec = SandboxSpec(
            image=template.id, cpu=req.cpuCount, memory_mb=req.memoryMB, env=env,
            network=req.network,
        )  # fmt: skip
        with st.db.session() as s:
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
        with st.lock(sandbox_id):
            try:
                with runtime_errors(sandbox_id):
                    handle = rt.create(sandbox_id, spec, st.workdir(sandbox_id))
            except SandboxError as exc:
                st.set_error(sandbox_id, exc.message)
                shutil.rmtree(st.workdir(sandbox_id), ignore_errors=True)
                raise
            return st.went_running(sandbox_id, handle, rt, timeout)

    def kill(self, sandbox_id: str) -> None:
        st = self.st
        with st.lock(sandbox_id), st.db.session() as s:
            row = st.row(s, sandbox_id)
            live = st.live.pop(sandbox_id, None)
            if live is not None:
                try:
                    live.runtime.destroy(live.handle)
                except SandboxRuntimeError:
                    log.exception("destroying sandbox %s", sandbox_id)
            elif row.handle and (rt := st.runtimes.get(row.runtime)) is not None:
                st.stop_quietly(rt, VMHandle.model_validate(row.handle))  # leftovers
            shutil.rmtree(st.workdir(sandbox_id), ignore_errors=True)
            row.state = "killed"
            row.handle = None
            row.end_at = None
            row.updated_at = st.clock()

    # ------------------------------------------------------------------ pause / resume

    def pause(self, sandbox_id: str, reason: str = "pause") -> Checkpoint:
        """Checkpoint, then stop: no CPU or memory held; on a runtime with a freezer (docker)
        checkpoint, then freeze: processes and memory kept, the row keeps the handle. At
        shutdown a sandbox is always stopped (the service leaves nothing it started behind).
        Returns the pause checkpoint."""
        st = self.st
        with st.lock(sandbox_id):
            if sandbox_id not in st.live:
                with st.db.session() as s:
                    state = st.row(s, sandbox_id).state
                raise Conflict("not_running", f"sandbox {sandbox_id!r} is {state}, not running")
            ck = self.graph.take(sandbox_id, "pause", None if reason == "pause" else reason)
            live = st.live.pop(sandbox_id)
            frozen = self._freeze(live, reason)
            if not frozen:
                try:
                    live.runtime.stop(live.handle)
                except SandboxRuntimeError:
                    log.exception("stopping sandbox %s after its pause checkpoint", sandbox_id)
            with st.db.session() as s:
                row = st.row(s, sandbox_id)
                row.state = "paused"
                row.handle = live.handle.model_dump(mode="json") if frozen else None
                row.end_at = None
                row.updated_at = st.clock()
            return checkpoint_view(ck)

    @staticmethod
    def _freeze(live: Live, reason: str) -> bool:
        if not live.runtime.capabilities.freezer or reason == "shutdown":
            return False
        try:
            live.runtime.freeze(live.handle)
        except SandboxRuntimeError:
            log.exception("freezing sandbox %s; stopping it instead", live.handle.sandbox_id)
            return False
        return True

    def _thaw(self, sandbox_id: str, rt: Runtime, data: dict | None) -> VMHandle | None:
        """The frozen sandbox running again, or None (not frozen, or gone: then whatever is
        left is stopped and the caller restores the pause checkpoint)."""
        if not data or not rt.capabilities.freezer:
            return None
        h = VMHandle.model_validate(data)
        try:
            rt.thaw(h)
        except SandboxRuntimeError as exc:
            log.warning("sandbox %s: cannot thaw (%s); restoring its checkpoint", sandbox_id, exc)
            self.st.stop_quietly(rt, h)
            return None
        return h

    def resume(
        self, sandbox_id: str, timeout: int | None = None, auto_pause: bool | None = None
    ) -> Sandbox:
        st = self.st
        with st.lock(sandbox_id):
            with st.db.session() as s:
                row = st.row(s, sandbox_id)
                if row.state == "running":
                    raise Conflict("already_running", f"sandbox {sandbox_id!r} is running")
                if row.state != "paused" or not row.head_checkpoint_id:
                    raise Conflict("not_paused",
                        f"sandbox {sandbox_id!r} is {row.state} and has nothing to resume from",
                    )  # fmt: skip
                head, runtime_name, frozen = row.head_checkpoint_id, row.runtime, row.handle
                if auto_pause is not None:
                    row.on_timeout = "pause" if auto_pause else "kill"
            rt = st.runtime(runtime_name)
            thawed = self._thaw(sandbox_id, rt, frozen)
            if thawed is not None:
                return st.went_running(sandbox_id, thawed, rt, timeout)
            with self.gc.holding([head]), self.gc.gate.shared():
                chain = self.graph.chain(head)
                with runtime_errors(sandbox_id):
                    handle = rt.restore(sandbox_id, chain, st.store, st.workdir(sandbox_id))
            with st.db.session() as s:
                s.get(SandboxRow, sandbox_id).error = None  # type: ignore[union-attr]
            return st.went_running(sandbox_id, handle, rt, timeout)

    def connect(self, sandbox_id: str, timeout: int | None = None) -> tuple[Sandbox, bool]:
        """E2B's connect: resume if paused; extend the timeout. Returns (sandbox, resumed)."""
        st = self.st
        with st.lock(sandbox_id):
            live = st.live.get(sandbox_id)
            if live is None:
                return self.resume(sandbox_id, timeout), True
            with st.db.session() as s:
                row = st.row(s, sandbox_id)
                if timeout is not None:
                    new_end = st.clock() + timedelta(seconds=timeout)
                    if live.end_at is None or new_end > live.end_at:
                        live.end_at = new_end
                        row.end_at = new_end
                return summary(row), False

    def set_timeout(self, sandbox_id: str, timeout: int) -> None:
        st = self.st
        with st.lock(sandbox_id), st.db.session() as s:
            row = st.row(s, sandbox_id)
            row.timeout_s = timeout
            end = st.clock() + timedelta(seconds=timeout) if timeout else None
            row.end_at = end
            live = st.live.get(sandbox_id)
            if live is not None:
                live.end_at = end

    def refresh(self, sandbox_id: str, duration: int) -> None:
        st = self.st
        with st.lock(sandbox_id), st.db.session() as s:
            row = st.row(s, sandbox_id)
            live = st.live.get(sandbox_id)
            if live is None:
                raise Conflict("not_running", f"sandbox {sandbox_id!r} is {row.state}")
            new_end = st.clock() + timedelta(seconds=duration)
            if live.end_at is not None and new_end > live.end_at:
                live.end_at = new_end
                row.end_at = new_end
