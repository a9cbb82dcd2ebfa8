"""The checkpoint graph and restore: taking checkpoints, their rows and manifests, lineage
(crossing forks to their source) and putting a sandbox back in the state of one of them.

A checkpoint's manifest is in the object store (``sandbox/manifests/<id>.json``), its row in
SQL with its parent; a sandbox's ``head_checkpoint_id`` is the newest state it was saved in.
Checkpoints and restores share the garbage collector's gate, so a collection never deletes
an object one of them is deduplicating against or reading.
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

from sqlalchemy import select

from services.sandbox.lifecycle.errors import (
    Conflict,
    Internal,
    NotFound,
    SandboxError,
    runtime_errors,
)
from services.sandbox.lifecycle.gc import MANIFEST_PREFIX, GarbageCollector
from services.sandbox.lifecycle.state import Live, SandboxState
from services.sandbox.lifecycle.views import aware, checkpoint_view
from services.sandbox.models import CheckpointRow, SandboxRow
from services.sandbox.runtime.base import CheckpointManifest
from shared.contracts.sandbox import Checkpoint

log = logging.getLogger("k3stack.sandbox")


class CheckpointGraph:
    """Checkpoints of running sandboxes, their lineage, and restore into the same sandbox."""

    def __init__(self, state: SandboxState, gc: GarbageCollector) -> None:
        self.st = state
        self.gc = gc

    # ------------------------------------------------------------------ taking

    def _row_of(
        self, m: CheckpointManifest, row: SandboxRow, kind: str, name: str | None, memory: bool
    ) -> CheckpointRow:
        """Store the manifest; the checkpoint's SQL row (not yet added)."""
        key = f"{MANIFEST_PREFIX}{m.id}.json"
        body = m.model_dump_json().encode()
        self.st.store.put(key, body, content_type="application/json")
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
            created_at=aware(m.created_at) or self.st.clock(), info=info,
        )  # fmt: skip

    def take(self, sandbox_id: str, kind: str, name: str | None = None) -> CheckpointRow:
        """Checkpoint a running sandbox (caller holds its lock); it keeps running."""
        live = self.st.require_running(sandbox_id)
        with self.gc.gate.shared():
            return self._take_gated(sandbox_id, live, kind, name)

    def _take_gated(
        self, sandbox_id: str, live: Live, kind: str, name: str | None
    ) -> CheckpointRow:
        st = self.st
        with st.db.session() as s:
            head = st.row(s, sandbox_id).head_checkpoint_id
        parent = self.manifest(head) if head else None
        with runtime_errors(sandbox_id):
            m = live.runtime.checkpoint(live.handle, parent, st.store)
        with st.db.session() as s:
            row = st.row(s, sandbox_id)
            ck = self._row_of(m, row, kind, name, live.runtime.capabilities.memory_checkpoint)
            s.add(ck)
            s.flush()
            row.head_checkpoint_id = m.id
            row.last_snapshot_at = st.clock()
            row.updated_at = st.clock()
            return ck

    def checkpoint(self, sandbox_id: str, name: str | None = None) -> Checkpoint:
        with self.st.lock(sandbox_id):
            return checkpoint_view(self.take(sandbox_id, "manual", name))

    # ------------------------------------------------------------------ reading the graph

    def manifest(self, checkpoint_id: str) -> CheckpointManifest:
        with self.st.db.session() as s:
            row = s.get(CheckpointRow, checkpoint_id)
            if row is None:
                raise NotFound.of("checkpoint", checkpoint_id)
            key = row.manifest_key
        try:
            return CheckpointManifest.model_validate_json(self.st.store.get(key))
        except KeyError as exc:
            raise Internal(
                "checkpoint_missing", f"manifest of checkpoint {checkpoint_id} is gone: {exc}"
            ) from exc

    def list(self, sandbox_id: str) -> list[Checkpoint]:
        with self.st.db.session() as s:
            if s.get(SandboxRow, sandbox_id) is None:
                raise NotFound.of("sandbox", sandbox_id)
            rows = s.scalars(
                select(CheckpointRow)
                .where(CheckpointRow.sandbox_id == sandbox_id)
                .order_by(CheckpointRow.created_at)
            ).all()
            return [checkpoint_view(r) for r in rows]

    def get(self, checkpoint_id: str) -> Checkpoint:
        with self.st.db.session() as s:
            row = s.get(CheckpointRow, checkpoint_id)
            if row is None:
                raise NotFound.of("checkpoint", checkpoint_id)
            return checkpoint_view(row)

    def lineage(self, checkpoint_id: str) -> list[Checkpoint]:
        """The checkpoint and its ancestors, oldest first (crossing forks to their source)."""
        chain: list[Checkpoint] = []
        with self.st.db.session() as s:
            cur: str | None = checkpoint_id
            while cur is not None:
                row = s.get(CheckpointRow, cur)
                if row is None:
                    if not chain:
                        raise NotFound.of("checkpoint", checkpoint_id)
                    raise Internal("checkpoint_missing", f"ancestor {cur} is missing")
                chain.append(checkpoint_view(row))
                cur = row.parent_id
        chain.reverse()
        return chain

    def sandbox_lineage(self, sandbox_id: str) -> list[Checkpoint]:
        with self.st.db.session() as s:
            head = self.st.row(s, sandbox_id).head_checkpoint_id
        return self.lineage(head) if head else []

    def chain(self, checkpoint_id: str) -> list[CheckpointManifest]:
        """The manifests a runtime restores from, oldest first."""
        return [self.manifest(c.id) for c in self.lineage(checkpoint_id)]

    def in_history(self, sandbox_id: str, checkpoint_id: str) -> bool:
        """Whether the checkpoint is this sandbox's own or an ancestor of one of its states."""
        with self.st.db.session() as s:
            ck = s.get(CheckpointRow, checkpoint_id)
            if ck is None:
                raise NotFound.of("checkpoint", checkpoint_id)
            if ck.sandbox_id == sandbox_id:
                return True
            row = self.st.row(s, sandbox_id)
            starts = [row.head_checkpoint_id, row.forked_from]
        for start in starts:
            if start and any(c.id == checkpoint_id for c in self.lineage(start)):
                return True
        return False

    # ------------------------------------------------------------------ restore

    def restore(self, sandbox_id: str, checkpoint_id: str) -> None:
        """Put the sandbox in the state of ``checkpoint_id`` (running). Unsaved state is dropped."""
        st = self.st
        with st.lock(sandbox_id), self.gc.holding([checkpoint_id]):
            with st.db.session() as s:
                runtime_name = st.row(s, sandbox_id).runtime
            if not self.in_history(sandbox_id, checkpoint_id):
                raise Conflict("foreign_checkpoint",
                    f"checkpoint {checkpoint_id!r} is not in the history of sandbox "
                    f"{sandbox_id!r}; fork its sandbox instead",
                )  # fmt: skip
            rt = st.runtime(runtime_name)
            chain = self.chain(checkpoint_id)
            live = st.live.pop(sandbox_id, None)
            if live is not None:
                with runtime_errors(sandbox_id):
                    live.runtime.destroy(live.handle)
            shutil.rmtree(st.workdir(sandbox_id), ignore_errors=True)
            try:
                with runtime_errors(sandbox_id), self.gc.gate.shared():
                    handle = rt.restore(sandbox_id, chain, st.store, st.workdir(sandbox_id))
            except SandboxError as exc:
                with st.db.session() as s:
                    row = s.get(SandboxRow, sandbox_id)
                    assert row is not None
                    if row.head_checkpoint_id:
                        row.state, row.handle = "paused", None
                        row.error = f"restore of {checkpoint_id} failed: {exc.message}"
                raise
            st.went_running(sandbox_id, handle, rt, head=checkpoint_id)
