"""Overlay checkpoints of the process runtime: the sandbox frozen, its upper directories walked
into trees with file contents stored content-addressed, and restored in place or materialised
from the store.

A mixin of :class:`~services.sandbox.runtime.process.runtime.ProcessRuntime`; it uses the
runtime's ``root``, ``images_dir``, tools (``bwrap``, ``nsenter``, ``setpriv``) and ``_lock``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal as signal_mod
import stat as stat_mod
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.sandbox.runtime.base import (
    CheckpointError,
    CheckpointManifest,
    Runtime,
    UnsupportedOperation,
    VMHandle,
)
from services.sandbox.runtime.process.fstree import (
    _OPAQUE_XATTR,
    OVERLAYS,
    _entry,
    _local_key,
    _signature,
    _upper_signature,
    _walk_upper,
)
from services.sandbox.runtime.process.host import (
    _ns_members,
    _proc_state,
    _umount,
)

if TYPE_CHECKING:
    from shared.objectstore import ObjectStore

BLOB_PREFIX = "sandbox/blobs/"
TREE_PREFIX = "sandbox/process/trees/"


class CheckpointsMixin(Runtime):
    """checkpoint / restore of the overlay upper directories."""

    # -- checkpoints

    def _gate(self, sandbox_id: str) -> threading.Lock:
        """Held while an exec starts its ``nsenter`` and while a checkpoint has the sandbox frozen."""
        with self._lock:
            return self._gates.setdefault(sandbox_id, threading.Lock())

    def _freeze(self, h: VMHandle) -> list[int]:
        """SIGSTOP every running process of the sandbox; returns those to continue, in order.

        The ``nsenter`` of each running exec is stopped first, and only once it is stopped are
        the sandbox's processes: ``nsenter`` waits for its child with ``WUNTRACED`` and, when it
        sees the child stopped, stops itself and continues the child only after it is itself
        continued. Stopped after its child, it would see the stop after the thaw and stay stopped
        for good, holding the exec's pipes open until its time limit. Stopped before (and
        continued after) its child, it never sees a stopped child (a continued child reports no
        stop), so the exec runs on as if nothing happened.
        """
        stopped: list[int] = []
        ns = h.data.get("pid_ns")
        if not h.pid or not ns:
            return stopped
        with self._lock:
            execs = list(self._execs.get(h.sandbox_id, ()))
        outer = []
        for proc in execs:
            try:
                os.kill(proc.pid, signal_mod.SIGSTOP)
                outer.append(proc.pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        for pid in outer:
            while _proc_state(pid) not in ("T", "t", "Z", "?") and time.monotonic() < deadline:
                time.sleep(0.001)
        for _ in range(3):  # processes forked during the sweep get the next one
            fresh = [p for p in _ns_members(h.pid, ns) if p not in stopped]
            if not fresh:
                break
            for pid in fresh:
                if _proc_state(pid) in ("T", "t", "Z"):
                    continue
                try:
                    os.kill(pid, signal_mod.SIGSTOP)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass
        return stopped + outer  # the sandbox's processes are continued before the nsenters

    @staticmethod
    def _thaw(pids: list[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal_mod.SIGCONT)
            except ProcessLookupError:
                pass

    def checkpoint(
        self, h: VMHandle, parent: CheckpointManifest | None, store: ObjectStore
    ) -> CheckpointManifest:
        self._check_alive(h)
        started = time.perf_counter()
        ckpt_id = f"ckpt-{secrets.token_hex(8)}"
        workdir = Path(h.workdir)
        cache_path = workdir / "fscache.json"
        try:
            cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
        except ValueError:
            cache = {}
        cached: dict[str, Any] = cache.get("files", {})
        gate = self._gate(h.sandbox_id)
        gate.acquire()  # no exec starts while the sandbox is frozen (see _freeze)
        frozen = self._freeze(h)
        t_frozen = time.perf_counter()
        try:
            trees: dict[str, list[dict[str, Any]]] = {}
            new_cache: dict[str, Any] = {}
            sig: dict[str, list[int]] = {}
            stats = {"files": 0, "hashed": 0, "new_blobs": 0, "new_bytes": 0, "bytes": 0}
            for ov in OVERLAYS:
                upper = workdir / "upper" / ov
                entries = []
                for rel, st in _walk_upper(upper):
                    e = _entry(upper, rel, st)
                    sig[f"{ov}/{rel}"] = _signature(st)
                    if e["t"] == "f":
                        stats["files"] += 1
                        stats["bytes"] += st.st_size
                        local = _local_key(st)
                        hit = cached.get(f"{ov}/{rel}")
                        if hit and hit[0] == local:
                            e["k"] = hit[1]
                        else:
                            e["k"] = self._store_blob(upper / rel, store, stats)
                        new_cache[f"{ov}/{rel}"] = [local, e["k"]]
                    entries.append(e)
                trees[ov] = entries
        except OSError as exc:
            raise CheckpointError(f"checkpoint of {h.sandbox_id} failed: {exc}") from exc
        finally:
            self._thaw(frozen)
            gate.release()
        t_walked = time.perf_counter()
        tree_body = json.dumps({"overlays": trees}, separators=(",", ":")).encode()
        tree_key = f"{TREE_PREFIX}{ckpt_id}.json"
        store.put(tree_key, tree_body)
        manifest = CheckpointManifest(
            id=ckpt_id,
            parent_id=parent.id if parent else None,
            sandbox_id=h.sandbox_id,
            runtime=self.name,
            spec=h.spec,
            memory_bytes=0,
            stored_bytes=stats["new_bytes"] + len(tree_body),
            disk_keys={"fs": tree_key},
            runtime_data={
                "files": stats["files"],
                "hashed_files": stats["hashed"],
                "new_blobs": stats["new_blobs"],
                "fs_bytes": stats["bytes"],
            },
            stats={
                "pause_ms": (t_frozen - started) * 1000,
                "downtime_ms": (t_walked - started) * 1000,
                "total_ms": (time.perf_counter() - started) * 1000,
            },
        )
        tmp = cache_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"checkpoint": ckpt_id, "files": new_cache, "sig": sig}))
        os.replace(tmp, cache_path)
        return manifest

    object_prefixes = (BLOB_PREFIX, TREE_PREFIX)

    def referenced_keys(self, m: CheckpointManifest, store: ObjectStore) -> set[str]:
        keys = super().referenced_keys(m, store)
        tree_key = m.disk_keys.get("fs")
        if tree_key:
            for entries in json.loads(store.get(tree_key))["overlays"].values():
                keys.update(e["k"] for e in entries if e.get("k"))
        return keys

    @staticmethod
    def _store_blob(path: Path, store: ObjectStore, stats: dict[str, int]) -> str:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        stats["hashed"] += 1
        key = BLOB_PREFIX + digest.hexdigest()
        if not store.exists(key):
            info = store.put_file(key, path)
            stats["new_blobs"] += 1
            stats["new_bytes"] += info.size
        return key

    def restore(
        self,
        sandbox_id: str,
        chain: list[CheckpointManifest],
        store: ObjectStore,
        workdir: Path,
    ) -> VMHandle:
        self._require()
        if not chain:
            raise CheckpointError("restore needs at least one checkpoint")
        top = chain[-1]
        if top.runtime != self.name:
            raise UnsupportedOperation(
                f"checkpoint {top.id} was taken by runtime {top.runtime!r}; "
                "runtime 'process' restores only its own"
            )
        tree_key = top.disk_keys.get("fs")
        if not tree_key:
            raise CheckpointError(f"checkpoint {top.id} has no filesystem tree")
        try:
            tree = json.loads(store.get(tree_key))["overlays"]
        except KeyError as exc:
            raise CheckpointError(f"checkpoint {top.id}: {exc}") from exc
        workdir = Path(workdir)
        in_place = self._workdir_matches(workdir, top.id)
        if not in_place:
            self._materialize(workdir, tree, store, top.id)
        for sub in ("work", "mnt"):
            for ov in OVERLAYS:
                (workdir / sub / ov).mkdir(parents=True, exist_ok=True)
        h = self._start(sandbox_id, top.spec, workdir, restored_from=top.id)
        h.data["restore_mode"] = "in_place" if in_place else "materialized"
        return h

    def _workdir_matches(self, workdir: Path, ckpt_id: str) -> bool:
        """Whether ``workdir``'s upper dirs are exactly what checkpoint ``ckpt_id`` captured.

        True after a pause in the same workdir when nothing wrote between checkpoint and stop:
        resume then reuses the files in place instead of fetching them from the store.
        """
        for ov in OVERLAYS:
            _umount(workdir / "mnt" / ov)
        try:
            cache = json.loads((workdir / "fscache.json").read_text())
        except (OSError, ValueError):
            return False
        if cache.get("checkpoint") != ckpt_id or "sig" not in cache:
            return False
        return _upper_signature(workdir) == cache["sig"]

    def _materialize(
        self, workdir: Path, tree: dict[str, list[dict[str, Any]]], store: ObjectStore, ckpt: str
    ) -> None:
        for sub in ("upper", "work"):
            shutil.rmtree(workdir / sub, ignore_errors=True)
        (workdir / "fscache.json").unlink(missing_ok=True)
        new_cache: dict[str, Any] = {}
        dirs: list[tuple[Path, dict[str, Any]]] = []
        for ov in OVERLAYS:
            upper = workdir / "upper" / ov
            upper.mkdir(parents=True, exist_ok=True)
            for e in tree.get(ov, []):
                dest = upper / e["p"]
                kind = e["t"]
                if kind == "d":
                    dest.mkdir(exist_ok=True)
                    if e.get("o"):
                        os.setxattr(dest, _OPAQUE_XATTR, b"y", follow_symlinks=False)
                    dirs.append((dest, e))
                    continue
                if kind == "f":
                    store.get_file(e["k"], dest)
                elif kind == "l":
                    os.symlink(e["l"], dest)
                elif kind == "w":
                    os.mknod(dest, stat_mod.S_IFCHR | 0o000, os.makedev(0, 0))
                elif kind == "p":
                    os.mkfifo(dest)
                else:
                    continue
                os.lchown(dest, e["u"], e["g"])
                if kind != "l":
                    os.chmod(dest, e["m"])
                os.utime(dest, ns=(e["mt"], e["mt"]), follow_symlinks=False)
                if kind == "f":
                    new_cache[f"{ov}/{e['p']}"] = [_local_key(os.lstat(dest)), e["k"]]
        for dest, e in reversed(dirs):  # children first, so their writes do not bump mtimes
            os.lchown(dest, e["u"], e["g"])
            os.chmod(dest, e["m"])
            os.utime(dest, ns=(e["mt"], e["mt"]), follow_symlinks=False)
        cache = {"checkpoint": ckpt, "files": new_cache, "sig": _upper_signature(workdir)}
        (workdir / "fscache.json").write_text(json.dumps(cache))
