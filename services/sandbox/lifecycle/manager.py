"""``SandboxManager``: the one engine behind the sandbox routes — a facade over its parts.

It owns policy; runtimes own mechanism (:mod:`services.sandbox.runtime.base`). Each part has
one job and its own module:

* :mod:`~services.sandbox.lifecycle.state` — the live set, per-sandbox locks, row transitions;
* :mod:`~services.sandbox.lifecycle.sandboxes` — create, kill, pause, resume, timeouts, recovery;
* :mod:`~services.sandbox.lifecycle.checkpoints` — the checkpoint graph and restore;
* :mod:`~services.sandbox.lifecycle.fork` — fork;
* :mod:`~services.sandbox.lifecycle.guest` — exec and files in running sandboxes;
* :mod:`~services.sandbox.lifecycle.gc` — garbage collection; :mod:`~.reaper` — background passes;
* :mod:`~services.sandbox.lifecycle.templates` — templates; :mod:`~.views` — contract models.

Errors are domain exceptions (:mod:`~services.sandbox.lifecycle.errors`), mapped to HTTP once
in ``api/errors.py``; nothing here imports ``api/``.

Invariants (checked by :meth:`SandboxManager.check_invariants`):

* a sandbox is ``running`` iff the manager holds a live handle for it;
* a ``paused`` sandbox has a ``head_checkpoint_id`` whose chain of parents is complete in SQL
  and whose manifests are in the store — so a restarted service can resume it;
* lifecycle operations on one sandbox (create, pause, resume, checkpoint, restore, fork's
  checkpoint, kill, timeout) are serialised by that sandbox's lock; exec and file operations
  are not (the runtime handles concurrent use), they only check the state first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from sqlalchemy import select

from services.sandbox.lifecycle.checkpoints import CheckpointGraph
from services.sandbox.lifecycle.errors import SandboxError
from services.sandbox.lifecycle.fork import Forker
from services.sandbox.lifecycle.gc import GarbageCollector
from services.sandbox.lifecycle.guest import GuestOps
from services.sandbox.lifecycle.reaper import Reaper
from services.sandbox.lifecycle.runtimes import pick_runtime
from services.sandbox.lifecycle.sandboxes import SandboxLifecycle
from services.sandbox.lifecycle.state import SandboxState
from services.sandbox.lifecycle.templates import TemplateCatalog
from services.sandbox.lifecycle.views import runtime_infos, utcnow
from services.sandbox.models import CheckpointRow, SandboxRow
from services.sandbox.runtime.base import CheckpointManifest, Runtime, SandboxSpec, VMHandle
from shared.contracts.sandbox import (
    Checkpoint,
    EntryInfo,
    ExecBody,
    ExecOutput,
    ExecStreamEvent,
    GCReport,
    NewSandbox,
    NewTemplate,
    PortForward,
    RuntimeInfo,
    Sandbox,
    SandboxDetail,
    SandboxMetric,
    Template,
)
from shared.db import ServiceDatabase
from shared.objectstore import ObjectStore
from shared.settings import SandboxSettings

log = logging.getLogger("k3stack.sandbox")


class SandboxManager:
    """Sandboxes, checkpoints and templates over a set of runtimes.

    Args:
        settings: the sandbox section of the settings.
        data_dir: where sandbox workdirs live (``<data_dir>/vms/<sandbox id>``).
        db: the service database (migrated by the caller).
        store: object store for checkpoint manifests (runtimes put bodies there too).
        runtimes: name -> runtime (see :func:`~services.sandbox.lifecycle.runtimes.make_runtimes`).
        clock: current UTC time; tests pass a fake one to drive timeouts.
        deployed: the service runs in deployed mode (``K3STACK_MODE=deployed``).
    """

    def __init__(
        self, *, settings: SandboxSettings, data_dir: Path, db: ServiceDatabase,
        store: ObjectStore, runtimes: dict[str, Runtime], clock: Callable[[], datetime] = utcnow,
        deployed: bool = False,
    ) -> None:  # fmt: skip
        self.state = st = SandboxState(
            settings=settings, data_dir=data_dir, db=db, store=store, runtimes=runtimes,
            clock=clock,
        )  # fmt: skip
        self.settings, self.data_dir, self.db, self.store = settings, st.data_dir, db, store
        self.runtimes = runtimes
        self.templates = TemplateCatalog(
            db=db, runtimes=runtimes, default_runtime=settings.runtime, clock=clock
        )
        self.gc = GarbageCollector(
            settings=settings, data_dir=st.data_dir, db=db, store=store, runtimes=runtimes,
            is_live=lambda sandbox_id: sandbox_id in st.live,
        )  # fmt: skip
        self.graph = CheckpointGraph(st, self.gc)
        self.sandboxes = SandboxLifecycle(st, self.graph, self.gc, self.templates, deployed)
        self.forker = Forker(st, self.graph, self.gc)
        self.guest = GuestOps(st)
        self.reaper = Reaper(self)
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self._prewarm: threading.Thread | None = None

    @property
    def clock(self) -> Callable[[], datetime]:
        """Current UTC time for every part (tests replace it to drive timeouts)."""
        return self.state.clock

    @clock.setter
    def clock(self, clock: Callable[[], datetime]) -> None:
        self.state.clock = clock

    # ------------------------------------------------------------------ start / stop

    def start(self, background: bool = True) -> None:
        """Seed built-in templates, adopt or recover sandboxes, start the reaper thread."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.templates.seed()
        self.sandboxes.recover()
        self._prewarm = threading.Thread(target=self._prewarm_templates, name="k3stack-prewarm",
                                         daemon=True)  # fmt: skip
        self._prewarm.start()
        if background:
            self._reaper = threading.Thread(
                target=self.reaper.loop, args=(self._stop,), name="k3stack-reaper", daemon=True
            )
            self._reaper.start()

    def close(self) -> None:
        """Stop background work, then apply ``on_shutdown`` to running sandboxes: ``pause``
        checkpoints and stops them, and stops frozen (paused docker) ones too (no VM or
        container outlives the service; resume brings them back from their checkpoints),
        ``keep`` leaves them running or frozen for the next manager to adopt."""
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(timeout=10)
        if self.settings.on_shutdown == "pause":
            self._pause_all(time.monotonic() + self.settings.shutdown_budget_s)
            self.sandboxes.stop_frozen()
        self.templates.close()
        for rt in self.runtimes.values():
            rt.close()
        if self._prewarm is not None:  # a QEMU it started after the pool closed is ended
            self._prewarm.join(timeout=30)

    def _pause_all(self, deadline: float) -> None:
        """Pause every running sandbox, several at once; one whose pause has not begun by
        ``deadline`` is stopped instead (its row falls back to its last checkpoint), so a stop
        ends within ``shutdown_budget_s`` plus one pause, whatever the number of sandboxes."""

        def pause(sandbox_id: str) -> None:
            if time.monotonic() > deadline:
                self.state.lose(sandbox_id, "the shutdown budget ran out before its pause")
                return
            try:
                self.pause(sandbox_id, reason="shutdown")
            except Exception:  # noqa: BLE001 - one failure must not strand the others
                log.exception("pausing sandbox %s at shutdown", sandbox_id)
                self.state.lose(sandbox_id, "pausing it at shutdown failed")

        ids = list(self.state.live)
        if ids:
            with ThreadPoolExecutor(min(8, len(ids)), thread_name_prefix="k3stack-down") as pool:
                list(pool.map(pause, ids))

    def _prewarm_templates(self) -> None:
        """The warm pool of each template of ``warm_pool_templates`` on its runtime (where it
        has one), so that the first restore of a fresh checkpoint of it starts no QEMU."""
        if not self.settings.warm_pool:
            return
        for template_id in self.settings.warm_pool_templates:
            try:
                row = self.templates.ready(template_id)
                runtime = None if row.runtime == "any" else row.runtime
                rt = pick_runtime(runtime, self.settings.runtime, self.runtimes)
                prewarm = getattr(rt, "prewarm", None)
                if prewarm is None:
                    continue
                req = NewSandbox(templateID=template_id)  # what a bare create gets
                env = (row.image or {}).get("env", {})
                prewarm(SandboxSpec(image=template_id, cpu=req.cpuCount, memory_mb=req.memoryMB,
                                    env=env, network=req.network))  # fmt: skip
                log.info("warm pool of template %s prewarmed on %s", template_id, rt.name)
            except Exception:  # noqa: BLE001 - an optimisation: restores still work without it
                log.exception("prewarming template %s", template_id)

    def recover(self) -> None:
        self.sandboxes.recover()

    def workdir(self, sandbox_id: str) -> Path:
        return self.state.workdir(sandbox_id)

    def running_ids(self) -> list[str]:
        """Ids of the sandboxes this manager holds running."""
        return list(self.state.live)

    def live_handle(self, sandbox_id: str) -> VMHandle | None:
        """The runtime handle of a running sandbox (None unless running here)."""
        live = self.state.live.get(sandbox_id)
        return live.handle if live else None

    def runtime_infos(self) -> list[RuntimeInfo]:
        return runtime_infos(self.settings.runtime, self.runtimes)

    # ------------------------------------------------------------------ lifecycle (SandboxLifecycle)

    def get(self, sandbox_id: str) -> SandboxDetail:
        return self.sandboxes.get(sandbox_id)

    def list(
        self, states: list[str] | None = None, metadata: dict[str, str] | None = None
    ) -> list[SandboxDetail]:
        return self.sandboxes.list(states, metadata)

    def create(self, req: NewSandbox) -> Sandbox:
        return self.sandboxes.create(req)

    def kill(self, sandbox_id: str) -> None:
        self.sandboxes.kill(sandbox_id)

    def pause(self, sandbox_id: str, reason: str = "pause") -> Checkpoint:
        return self.sandboxes.pause(sandbox_id, reason)

    def resume(
        self, sandbox_id: str, timeout: int | None = None, auto_pause: bool | None = None
    ) -> Sandbox:
        return self.sandboxes.resume(sandbox_id, timeout, auto_pause)

    def connect(self, sandbox_id: str, timeout: int | None = None) -> tuple[Sandbox, bool]:
        return self.sandboxes.connect(sandbox_id, timeout)

    def set_timeout(self, sandbox_id: str, timeout: int) -> None:
        self.sandboxes.set_timeout(sandbox_id, timeout)

    def refresh(self, sandbox_id: str, duration: int) -> None:
        self.sandboxes.refresh(sandbox_id, duration)

    def touch(self, sandbox_id: str) -> None:
        self.state.touch(sandbox_id)

    # ------------------------------------------------------------------ checkpoints and restore (CheckpointGraph)

    def checkpoint(self, sandbox_id: str, name: str | None = None) -> Checkpoint:
        return self.graph.checkpoint(sandbox_id, name)

    def list_checkpoints(self, sandbox_id: str) -> list[Checkpoint]:
        return self.graph.list(sandbox_id)

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        return self.graph.get(checkpoint_id)

    def lineage(self, checkpoint_id: str) -> list[Checkpoint]:
        return self.graph.lineage(checkpoint_id)

    def sandbox_lineage(self, sandbox_id: str) -> list[Checkpoint]:
        return self.graph.sandbox_lineage(sandbox_id)

    def manifest(self, checkpoint_id: str) -> CheckpointManifest:
        return self.graph.manifest(checkpoint_id)

    def restore(self, sandbox_id: str, checkpoint_id: str) -> SandboxDetail:
        """Put the sandbox in the state of ``checkpoint_id`` (running). Unsaved state is dropped."""
        self.graph.restore(sandbox_id, checkpoint_id)
        return self.get(sandbox_id)

    # ------------------------------------------------------------------ fork (Forker)

    def fork(
        self, sandbox_id: str, count: int, timeout: int | None = None, memory: bool = True
    ) -> list[Sandbox | SandboxError]:
        """One entry per child: the running child, or the error that stopped it."""
        return self.forker.fork(sandbox_id, count, timeout, memory)

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

    # ------------------------------------------------------------------ guest calls (GuestOps)

    def exec(self, sandbox_id: str, body: ExecBody) -> ExecOutput:
        return self.guest.exec(sandbox_id, body)

    def exec_stream(self, sandbox_id: str, body: ExecBody) -> Iterator[ExecStreamEvent]:
        return self.guest.exec_stream(sandbox_id, body)

    def metrics(self, sandbox_id: str) -> SandboxMetric:
        return self.guest.metrics(sandbox_id)

    def expose_port(self, sandbox_id: str, port: int) -> PortForward:
        return self.guest.expose_port(sandbox_id, port)

    def kill_process(self, sandbox_id: str, pid: int, signal: int) -> None:
        self.guest.kill_process(sandbox_id, pid, signal)

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        return self.guest.read_file(sandbox_id, path)

    def read_file_stream(self, sandbox_id: str, path: str) -> Iterator[bytes]:
        return self.guest.read_file_stream(sandbox_id, path)

    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int) -> EntryInfo:
        return self.guest.write_file(sandbox_id, path, data, mode)

    def write_file_stream(
        self, sandbox_id: str, path: str, chunks: Iterable[bytes], mode: int
    ) -> EntryInfo:
        return self.guest.write_file_stream(sandbox_id, path, chunks, mode)

    def list_dir(self, sandbox_id: str, path: str) -> list[EntryInfo]:
        return self.guest.list_dir(sandbox_id, path)

    def stat(self, sandbox_id: str, path: str) -> EntryInfo:
        return self.guest.stat(sandbox_id, path)

    def remove(self, sandbox_id: str, path: str, recursive: bool) -> None:
        self.guest.remove(sandbox_id, path, recursive)

    def make_dir(self, sandbox_id: str, path: str) -> EntryInfo:
        return self.guest.make_dir(sandbox_id, path)

    # ------------------------------------------------------------------ invariants

    def check_invariants(self) -> None:
        """Assert the invariants in the module docstring (tests call this)."""
        live = self.state.live
        with self.db.session() as s:
            for row in s.scalars(select(SandboxRow)).all():
                running = row.state == "running"
                assert running == (row.id in live), (
                    f"sandbox {row.id} is {row.state} but live={row.id in live}"
                )
                if row.state == "paused":
                    assert row.head_checkpoint_id, f"paused sandbox {row.id} has no checkpoint"
                    cur: str | None = row.head_checkpoint_id
                    while cur:
                        ck = s.get(CheckpointRow, cur)
                        assert ck is not None, f"checkpoint {cur} of {row.id} missing in SQL"
                        assert self.store.exists(ck.manifest_key), f"manifest of {cur} missing"
                        cur = ck.parent_id


__all__ = ["SandboxManager"]
