"""Garbage collection of checkpoints and stored objects (mark and sweep), and the gate that
keeps it apart from checkpoints and restores.

Nothing is deleted when a sandbox is killed; a collection (the reaper every ``gc_interval_s``,
or ``POST /gc``) marks what the checkpoints of sandboxes that are not killed still reach, and
sweeps the rest of the checkpoint rows and stored objects. Operations in flight ``hold`` the
checkpoints they use, so neither a collection nor ``DELETE /checkpoints`` takes them away.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, select

from services.sandbox.lifecycle.errors import Conflict, NotFound
from services.sandbox.lifecycle.views import aware as _aware
from services.sandbox.models import CheckpointRow, SandboxRow
from services.sandbox.runtime.base import CheckpointManifest, Runtime
from shared.contracts.sandbox import GCReport
from shared.db import ServiceDatabase
from shared.objectstore import ObjectStore
from shared.settings import SandboxSettings

log = logging.getLogger("k3stack.sandbox")

MANIFEST_PREFIX = "sandbox/manifests/"


class Gate:
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


class GarbageCollector:
    """Mark and sweep over SQL rows, the object store and the runtimes' local caches.

    ``is_live(sandbox_id)``: whether the manager holds the sandbox running (its workdir stays).
    """

    def __init__(
        self, *, settings: SandboxSettings, data_dir: Path, db: ServiceDatabase,
        store: ObjectStore, runtimes: dict[str, Runtime], is_live: Callable[[str], bool],
    ) -> None:  # fmt: skip
        self.settings = settings
        self.data_dir = Path(data_dir)
        self.db = db
        self.store = store
        self.runtimes = runtimes
        self.is_live = is_live
        self.gate = Gate()
        self._holds: Counter[str] = Counter()
        self._holds_lock = threading.Lock()

    def hold(self, checkpoint_ids: Iterable[str]) -> None:
        with self._holds_lock:
            self._holds.update(checkpoint_ids)

    def release(self, checkpoint_ids: Iterable[str]) -> None:
        with self._holds_lock:
            self._holds.subtract(checkpoint_ids)
            self._holds += Counter()  # drop zero counts

    @contextmanager
    def holding(self, checkpoint_ids: list[str]) -> Iterator[None]:
        """Keep these checkpoints (and their ancestors) alive while an operation uses them:
        DELETE /checkpoints refuses them, the GC counts them as reachable."""
        self.hold(checkpoint_ids)
        try:
            yield
        finally:
            self.release(checkpoint_ids)

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Delete a checkpoint nothing depends on (its objects go at the next GC).

        409 when it is the head of a sandbox that is not killed (resume/restore needs it), the
        parent of another checkpoint, the fork source of a sandbox that is not killed, or in use
        by an operation in flight."""
        with self._holds_lock, self.db.session() as s:
            row = s.get(CheckpointRow, checkpoint_id)
            if row is None:
                raise NotFound.of("checkpoint", checkpoint_id)
            if self._holds.get(checkpoint_id):
                raise Conflict("checkpoint_in_use",
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
                raise Conflict("checkpoint_in_use",
                    f"checkpoint {checkpoint_id!r} is the {what} of sandbox {user.id!r} "
                    f"({user.state}); kill that sandbox first",
                )  # fmt: skip
            child = s.scalars(
                select(CheckpointRow.id).where(CheckpointRow.parent_id == checkpoint_id)
            ).first()
            if child is not None:
                raise Conflict("checkpoint_in_use",
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
        with self.gate.exclusive():
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

    def restorable(self) -> set[str]:
        """Ids of the checkpoints a sandbox may still restore (the mark's reachable set)."""
        return self._mark()[2]

    def _mark(self) -> tuple[dict[str, str], dict[str, tuple], set[str]]:
        """Sandbox states, checkpoint rows (parent, manifest key, runtime, sandbox) and the
        reachable checkpoints (see :meth:`collect_garbage`)."""
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
        return sandboxes, cks, reachable

    def _collect(self, grace: float) -> GCReport:
        report = GCReport(
            checkpoints_reachable=0, checkpoints_deleted=0, objects_scanned=0,
            objects_deleted=0, bytes_freed=0, objects_in_grace=0, local_files_deleted=0,
            local_bytes_freed=0, duration_ms=0.0,
        )  # fmt: skip
        # ---- mark: checkpoints
        sandboxes, cks, reachable = self._mark()
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
                if sandboxes.get(wd.name, "killed") != "killed" or self.is_live(wd.name):
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
