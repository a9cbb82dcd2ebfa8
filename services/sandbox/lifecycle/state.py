"""What every lifecycle part shares: the live set, per-sandbox locks and the row transitions.

A sandbox is ``running`` iff :attr:`SandboxState.live` holds a handle for it. The transitions
here (went running, lost, error) keep that true, whichever part makes them: lifecycle, restore,
fork or the reaper. Lifecycle operations on one sandbox are serialised by :meth:`lock`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from services.sandbox.lifecycle.errors import Conflict, NotFound, Unavailable
from services.sandbox.lifecycle.views import summary
from services.sandbox.models import SandboxRow
from services.sandbox.runtime.base import Runtime, VMHandle
from shared.contracts.sandbox import Sandbox
from shared.db import ServiceDatabase
from shared.objectstore import ObjectStore
from shared.settings import SandboxSettings

log = logging.getLogger("k3stack.sandbox")


@dataclass
class Live:
    """A running sandbox as the manager holds it."""

    handle: VMHandle
    runtime: Runtime
    end_at: datetime | None


class SandboxState:
    """The records (SQL, store) and the in-memory live set the parts work on."""

    def __init__(
        self, *, settings: SandboxSettings, data_dir: Path, db: ServiceDatabase,
        store: ObjectStore, runtimes: dict[str, Runtime], clock: Callable[[], datetime],
    ) -> None:  # fmt: skip
        self.settings = settings
        self.data_dir = Path(data_dir)
        self.db = db
        self.store = store
        self.runtimes = runtimes
        self.clock = clock
        self.live: dict[str, Live] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()

    def lock(self, sandbox_id: str) -> threading.RLock:
        with self._locks_guard:
            lock = self._locks.get(sandbox_id)
            if lock is None:
                lock = self._locks[sandbox_id] = threading.RLock()
            return lock

    def workdir(self, sandbox_id: str) -> Path:
        return self.data_dir / "vms" / sandbox_id

    def runtime(self, name: str) -> Runtime:
        rt = self.runtimes.get(name)
        if rt is None:
            raise Unavailable("runtime_unavailable", f"runtime {name!r} is gone")
        return rt

    @staticmethod
    def row(s: Any, sandbox_id: str) -> SandboxRow:
        """The sandbox's row; NotFound when there is none or it was killed."""
        row = s.get(SandboxRow, sandbox_id)
        if row is None:
            raise NotFound.of("sandbox", sandbox_id)
        if row.state == "killed":
            raise NotFound("not_found", f"sandbox {sandbox_id!r} was killed")
        return row

    def require_running(self, sandbox_id: str) -> Live:
        live = self.live.get(sandbox_id)
        if live is not None:
            return live
        with self.db.session() as s:
            row = self.row(s, sandbox_id)
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
        live = self.live.get(sandbox_id)
        if live is None:
            return
        with self.db.session() as s:
            row = s.get(SandboxRow, sandbox_id)
            timeout = row.timeout_s if row else 0
        if timeout:
            new_end = self.clock() + timedelta(seconds=timeout)
            if live.end_at is None or new_end > live.end_at:
                live.end_at = new_end

    # ------------------------------------------------------------------ transitions

    def went_running(
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
            self.live[sandbox_id] = Live(handle, rt, end_at)
            return summary(row)

    def set_error(self, sandbox_id: str, message: str) -> None:
        with self.db.session() as s:
            row = s.get(SandboxRow, sandbox_id)
            if row is not None:
                row.state = "error"
                row.error = message
                row.handle = None
                row.updated_at = self.clock()

    def stop_quietly(self, rt: Runtime, handle: VMHandle) -> None:
        """Release whatever is left of a VM (processes, memory file); never raises."""
        try:
            rt.stop(handle)
        except Exception:  # noqa: BLE001 - cleanup of a dead VM must not fail its caller
            log.exception("stopping what is left of sandbox %s", handle.sandbox_id)

    def lose(self, sandbox_id: str, why: str) -> None:
        """Stop a live sandbox that cannot be saved now; its row falls back to its last
        checkpoint (or error). No VM is left behind."""
        live = self.live.pop(sandbox_id, None)
        if live is not None:
            self.stop_quietly(live.runtime, live.handle)
        with self.db.session() as s:
            row = s.get(SandboxRow, sandbox_id)
            if row is not None and row.state in ("running", "creating"):
                self.mark_lost(row, why)

    def mark_lost(self, row: SandboxRow, why: str) -> None:
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
