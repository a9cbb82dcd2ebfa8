"""The reaper: one pass over the running sandboxes every ``reaper_interval_s``.

A pass stops what timed out (pause or kill, per sandbox), takes periodic snapshots, notices VMs
that died (released, then recovered from their last checkpoint) and, every ``gc_interval_s``,
runs garbage collection. Sandboxes busy with a lifecycle operation are skipped until the next
pass. Time comes from the manager's clock, so tests drive passes with a fake one.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from services.sandbox.lifecycle.errors import SandboxError
from services.sandbox.lifecycle.views import aware as _aware
from services.sandbox.models import SandboxRow

if TYPE_CHECKING:
    from services.sandbox.lifecycle.manager import SandboxManager

log = logging.getLogger("k3stack.sandbox")


class Reaper:
    """Timeouts, periodic snapshots, liveness and scheduled GC for one manager."""

    def __init__(self, manager: SandboxManager) -> None:
        self.manager = manager
        self.settings = manager.settings
        self._last_gc = manager.clock()

    def loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.settings.reaper_interval_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the reaper must outlive one bad tick
                log.exception("sandbox reaper tick failed")

    def tick(self) -> dict[str, list[str]]:
        """One pass of timeouts, periodic snapshots and liveness (and, every ``gc_interval_s``,
        garbage collection). Returns what it did."""
        m = self.manager
        done = self._pass()
        every = self.settings.gc_interval_s
        now = m.clock()
        if every > 0 and (now - self._last_gc).total_seconds() >= every:
            self._last_gc = now
            try:
                m.collect_garbage()
            except Exception:  # noqa: BLE001 - the next interval tries again
                log.exception("sandbox gc failed")
        return done

    def _pass(self) -> dict[str, list[str]]:
        m = self.manager
        done: dict[str, list[str]] = {"paused": [], "killed": [], "snapshots": [], "lost": []}
        now = m.clock()
        interval = self.settings.snapshot_interval_s
        st = m.state
        for sandbox_id in list(st.live):
            lock = st.lock(sandbox_id)
            if not lock.acquire(blocking=False):
                continue  # busy with a lifecycle operation; next tick
            try:
                live = st.live.get(sandbox_id)
                if live is None:
                    continue
                broken = live.runtime.broken_reason(live.handle)
                if broken or not live.runtime.is_alive(live.handle):
                    st.live.pop(sandbox_id, None)
                    st.stop_quietly(live.runtime, live.handle)  # memory file, sockets
                    with st.db.session() as s:
                        row = s.get(SandboxRow, sandbox_id)
                        if row is not None:
                            why = broken or "the sandbox's VM exited unexpectedly"
                            st.mark_lost(row, why)
                    done["lost"].append(sandbox_id)
                    continue
                if live.end_at is not None and now >= live.end_at:
                    with st.db.session() as s:
                        action = s.get(SandboxRow, sandbox_id).on_timeout  # type: ignore[union-attr]
                    try:
                        if action == "pause":
                            m.pause(sandbox_id, reason="timeout")
                            done["paused"].append(sandbox_id)
                        else:
                            m.kill(sandbox_id)
                            done["killed"].append(sandbox_id)
                    except SandboxError as exc:
                        log.error(
                            "timeout %s of sandbox %s failed: %s", action, sandbox_id, exc.message
                        )
                    continue
                if interval > 0:
                    with st.db.session() as s:
                        row = s.get(SandboxRow, sandbox_id)
                        last = _aware(row.last_snapshot_at or row.started_at) if row else now
                    if last is not None and (now - last).total_seconds() >= interval:
                        try:
                            m.graph.take(sandbox_id, "periodic")
                            done["snapshots"].append(sandbox_id)
                        except SandboxError as exc:
                            log.error("periodic snapshot of %s failed: %s", sandbox_id, exc.message)
            finally:
                lock.release()
        return done
