"""The ``firecracker`` runtime: the sandbox lifecycle through Firecracker's REST API.

Used where a ``firecracker`` binary and ``/dev/kvm`` exist (none on the machines this project is
developed on: the code path is complete and unit-tested against a fake API socket, see
``tests/sandbox/test_firecracker.py``). One Firecracker process per sandbox, its API on a unix
socket under the workdir:

* create: ``PUT /machine-config`` (``track_dirty_pages: true``, so snapshots can be ``Diff``),
  ``PUT /boot-source``, ``PUT /drives/rootfs`` (a private copy of the image's ext4),
  ``PUT /vsock`` (guest agent), ``PUT /actions {InstanceStart}``, then the agent answers.
* checkpoint: ``PATCH /vm {Paused}``, ``PUT /snapshot/create`` (``Full`` for the first layer,
  ``Diff`` after: KVM's dirty log gives only the pages written since the last snapshot, as a
  sparse memory file), ``PATCH /vm {Resumed}``; then, with the VM running again, the memory
  file's pages (for a Diff, those in its data extents; the rest are the parent's) become one
  layer of :mod:`services.sandbox.pagestore` — the packs and page maps the microvm runtime
  uses, deduplicated across runtimes, zero pages free; the rootfs is stored as
  content-addressed 64 KiB chunks, so unchanged chunks cost nothing.
* restore: the newest page map is materialised into a private sparse memory file (Diff
  snapshots are not resumable on their own; this is the "rebase" Firecracker's docs ask for),
  then a fresh process gets ``PUT /snapshot/load`` with a ``File`` memory backend,
  ``track_dirty_pages`` and ``resume_vm``, and a ``vsock_override`` for its own socket.
* stop: the process is killed (0 RSS); destroy also deletes the workdir.

Exec and files go through the guest agent over vsock (``CONNECT <port>`` on the vsock UDS);
the agent client is injected (``agent_connector``) and defaults to the microVM runtime's
host-side protocol, which speaks the same frames.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import numpy as np

from services.sandbox.pagestore import (
    PAGE_SIZE,
    LayerStats,
    PageMap,
    PageStores,
    file_page_hashes,
    page_hashes,
    write_sparse_file,
)
from services.sandbox.runtime.base import (
    CheckpointError,
    CheckpointManifest,
    ExecEvent,
    ExecRequest,
    ExecResult,
    FileInfo,
    GuestAgentError,
    GuestFileTooLarge,
    Runtime,
    RuntimeCapabilities,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxSpec,
    UnsupportedOperation,
    VMHandle,
)
from services.sandbox.runtime.sockets import until_connected

if TYPE_CHECKING:
    from shared.objectstore import ObjectStore

PAGE = PAGE_SIZE
DISK_CHUNK = 64 * 1024
CHUNK_PREFIX = "sandbox/disk/"
MAP_PREFIX = "sandbox/firecracker/maps/"
STATE_PREFIX = "sandbox/firecracker/state/"
AGENT_VSOCK_PORT = 1024
GUEST_CID = 3
BOOT_ARGS = "console=ttyS0 reboot=k panic=1 pci=off quiet init=/init"


class FirecrackerAPIError(CheckpointError):
    """Firecracker answered an API call with an error (its ``fault_message`` is the message)."""


class FirecrackerAPI:
    """Firecracker's REST API over its unix socket (HTTP/1.1, JSON bodies), through httpx's
    unix-socket transport."""

    def __init__(self, sock_path: Path, timeout: float = 30.0) -> None:
        self.sock_path = Path(sock_path)
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        transport = httpx.HTTPTransport(uds=str(self.sock_path))
        try:
            with httpx.Client(
                transport=transport, base_url="http://localhost", timeout=self.timeout
            ) as client:
                resp = client.request(
                    method, path, json=body, headers={"Accept": "application/json"}
                )
        except httpx.TransportError as exc:
            raise SandboxNotRunning(f"firecracker API {self.sock_path} unreachable: {exc}") from exc
        data = resp.content
        parsed = json.loads(data) if data else None
        if resp.status_code >= 300:
            fault = parsed.get("fault_message") if isinstance(parsed, dict) else resp.text
            raise FirecrackerAPIError(f"firecracker {method} {path}: {resp.status_code} {fault}")
        return parsed

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self.call("PUT", path, body)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self.call("PATCH", path, body)


class AgentClient(Protocol):
    """What the runtime needs from the guest agent (one connection per sandbox)."""

    def exec(self, req: ExecRequest) -> ExecResult: ...
    def exec_stream(self, req: ExecRequest) -> Iterator[ExecEvent]: ...
    def kill_process(self, pid: int, signal: int) -> None: ...
    def read_file(self, path: str) -> bytes: ...
    def write_file(self, path: str, data: bytes, mode: int) -> FileInfo: ...
    def list_dir(self, path: str) -> list[FileInfo]: ...
    def stat(self, path: str) -> FileInfo: ...
    def remove(self, path: str, recursive: bool) -> None: ...
    def close(self) -> None: ...


def vsock_connect(
    uds_path: Path, port: int = AGENT_VSOCK_PORT, timeout: float = 30.0
) -> socket.socket:
    """Open a host->guest vsock stream through Firecracker's UDS (``CONNECT <port>``), tried
    again every 20 ms until the guest's agent answers ``OK``, for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout

    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.connect(str(uds_path))
            sock.sendall(f"CONNECT {port}\n".encode())
            line = b""
            while not line.endswith(b"\n"):
                chunk = sock.recv(1)
                if not chunk:
                    raise ConnectionError("vsock closed before OK")
                line += chunk
            if not line.startswith(b"OK "):
                raise ConnectionError(f"vsock answered {line!r}")
        except OSError:
            sock.close()
            raise
        sock.settimeout(None)
        return sock

    try:
        return until_connected(connect, timeout, every_s=0.02)
    except OSError as exc:
        raise GuestAgentError(
            f"guest agent not reachable on vsock {uds_path}:{port}: {exc}"
        ) from None


def _default_agent_connector(sock: socket.socket) -> AgentClient:
    try:
        from services.sandbox.guest import protocol  # the microvm runtime's host side
    except ImportError as exc:
        raise RuntimeUnavailable(f"guest agent protocol unavailable: {exc}") from exc
    factory = getattr(protocol, "client_for_socket", None)
    if factory is None:
        raise RuntimeUnavailable("services.sandbox.guest.protocol has no client_for_socket(sock)")
    return factory(sock)


def _data_extents(path: Path) -> Iterator[tuple[int, int]]:
    """(offset, length) of the data regions of a sparse file (SEEK_DATA / SEEK_HOLE)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        off = 0
        while off < end:
            try:
                data = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after off
                return
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            yield data, hole - data
            off = hole
    finally:
        os.close(fd)


class FirecrackerRuntime(Runtime):
    """Sandboxes as Firecracker microVMs. ``spawn`` and ``agent_connector`` are injectable."""

    name = "firecracker"
    capabilities = RuntimeCapabilities(memory_checkpoint=True, fork=True, network_allowlist=False)

    def __init__(
        self,
        root: Path,
        *,
        binary: str | None = None,
        kernel: Path | None = None,
        images: dict[str, Path] | None = None,
        spawn: Callable[[list[str]], Any] | None = None,
        agent_connector: Callable[[socket.socket], AgentClient] | None = None,
        kvm_device: Path = Path("/dev/kvm"),
    ) -> None:
        self.root = Path(root)
        self.binary = binary or shutil.which("firecracker")
        self.kernel = kernel or self.root / "vmlinux"
        self.images = images
        self.kvm_device = kvm_device
        self._spawn = spawn or self._spawn_process
        self._connector = agent_connector or _default_agent_connector
        self._agents: dict[str, AgentClient] = {}
        self._procs: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._pagestores = PageStores()

    # -- availability

    def available(self) -> tuple[bool, str]:
        if not self.binary:
            return False, "firecracker binary not on PATH"
        if not self.kvm_device.exists():
            return False, f"{self.kvm_device} missing (Firecracker needs KVM)"
        if not Path(self.kernel).exists():
            return False, f"guest kernel {self.kernel} missing"
        return True, f"{self.binary} with {self.kernel}"

    def _image_path(self, image: str) -> Path:
        path = (self.images or {}).get(image) or self.root / "images" / f"{image}.ext4"
        if not Path(path).exists():
            raise RuntimeUnavailable(f"firecracker image {image!r} missing at {path}")
        return Path(path)

    # -- process and API plumbing

    @staticmethod
    def _spawn_process(argv: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    def _launch(self, sandbox_id: str, workdir: Path, gen: int) -> tuple[FirecrackerAPI, Any]:
        sock = workdir / f"fc-{gen}.sock"
        sock.unlink(missing_ok=True)
        proc = self._spawn([str(self.binary), "--api-sock", str(sock), "--id", sandbox_id])
        deadline = time.monotonic() + 10
        while not sock.exists():
            if time.monotonic() > deadline or (hasattr(proc, "poll") and proc.poll() is not None):
                raise RuntimeUnavailable(f"firecracker did not open its API socket {sock}")
            time.sleep(0.005)
        with self._lock:
            self._procs[sandbox_id] = proc
        return FirecrackerAPI(sock), proc

    @staticmethod
    def _api(h: VMHandle) -> FirecrackerAPI:
        return FirecrackerAPI(Path(h.data["api_sock"]))

    def _agent(self, h: VMHandle) -> AgentClient:
        with self._lock:
            agent = self._agents.get(h.sandbox_id)
        if agent is None:
            if not self.is_alive(h):
                raise SandboxNotRunning(f"sandbox {h.sandbox_id} is not running")
            agent = self._connector(vsock_connect(Path(h.data["vsock"])))
            with self._lock:
                self._agents[h.sandbox_id] = agent
        return agent

    def _drop_agent(self, sandbox_id: str) -> None:
        with self._lock:
            agent = self._agents.pop(sandbox_id, None)
        if agent is not None:
            try:
                agent.close()
            except OSError:
                pass

    # -- lifecycle

    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        ok, why = self.available()
        if not ok:
            raise RuntimeUnavailable(f"firecracker runtime unavailable: {why}")
        if spec.network.mode != "none":
            raise UnsupportedOperation("runtime 'firecracker' supports network mode 'none' only")
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        rootfs = workdir / "rootfs.ext4"
        subprocess.run(
            ["cp", "--reflink=auto", "--sparse=always", str(self._image_path(spec.image)), str(rootfs)],
            check=True,
        )  # fmt: skip
        vsock = workdir / "vsock-0.sock"
        api, proc = self._launch(sandbox_id, workdir, 0)
        api.put("/machine-config", {
            "vcpu_count": spec.cpu, "mem_size_mib": spec.memory_mb, "track_dirty_pages": True,
        })  # fmt: skip
        api.put("/boot-source", {"kernel_image_path": str(self.kernel), "boot_args": BOOT_ARGS})
        api.put("/drives/rootfs", {
            "drive_id": "rootfs", "path_on_host": str(rootfs),
            "is_root_device": True, "is_read_only": False,
        })  # fmt: skip
        api.put("/vsock", {"guest_cid": GUEST_CID, "uds_path": str(vsock)})
        api.put("/actions", {"action_type": "InstanceStart"})
        h = VMHandle(
            sandbox_id=sandbox_id, runtime=self.name, workdir=workdir, spec=spec,
            pid=getattr(proc, "pid", None),
            data={"api_sock": str(api.sock_path), "vsock": str(vsock), "gen": 0, "rootfs": str(rootfs)},
        )  # fmt: skip
        self._agent(h)
        return h

    def broken_reason(self, h: VMHandle) -> str | None:
        with self._lock:
            agent = self._agents.get(h.sandbox_id)
        return getattr(agent, "broken", None)

    def is_alive(self, h: VMHandle) -> bool:
        with self._lock:
            proc = self._procs.get(h.sandbox_id)
        if proc is not None and hasattr(proc, "poll"):
            return proc.poll() is None
        if not h.pid:
            return False
        try:  # adopted after a service restart: the pid must still be this sandbox's VMM
            cmdline = Path(f"/proc/{h.pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"firecracker" in cmdline and h.data.get("api_sock", "").encode() in cmdline

    def stop(self, h: VMHandle) -> None:
        self._drop_agent(h.sandbox_id)
        with self._lock:
            proc = self._procs.pop(h.sandbox_id, None)
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)
        elif h.pid:
            try:
                os.kill(h.pid, 9)
            except ProcessLookupError:
                pass

    def destroy(self, h: VMHandle) -> None:
        self.stop(h)
        shutil.rmtree(h.workdir, ignore_errors=True)

    # -- checkpoints

    def checkpoint(
        self, h: VMHandle, parent: CheckpointManifest | None, store: ObjectStore
    ) -> CheckpointManifest:
        if not self.is_alive(h):
            raise SandboxNotRunning(f"sandbox {h.sandbox_id} is not running")
        started = time.perf_counter()
        ckpt_id = f"ckpt-{secrets.token_hex(8)}"
        workdir = Path(h.workdir)
        state_path, mem_path = workdir / f"{ckpt_id}.vmstate", workdir / f"{ckpt_id}.mem"
        api = self._api(h)
        # A Diff snapshot holds the pages dirtied since the last snapshot of *this process*;
        # a process restored from `parent` starts with a clean dirty log, so Diff is right too.
        diff = parent is not None and parent.id in (h.data.get("last_checkpoint"), h.restored_from)
        api.patch("/vm", {"state": "Paused"})
        try:
            api.put("/snapshot/create", {
                "snapshot_type": "Diff" if diff else "Full",
                "snapshot_path": str(state_path), "mem_file_path": str(mem_path),
            })  # fmt: skip
        finally:
            api.patch("/vm", {"state": "Resumed"})
        downtime = time.perf_counter() - started
        map_key = f"{MAP_PREFIX}{ckpt_id}.pagemap"
        try:
            parent_map = None
            if diff and parent and parent.page_map_key:
                parent_map = self._pagestores.of(store).load_map(parent.page_map_key)
            layer = self._store_memory(mem_path, parent_map, store, map_key)
            state_key = store.put_content_addressed(state_path.read_bytes(), STATE_PREFIX)
            disk_key, disk_new = self._store_disk(Path(h.data["rootfs"]), store, ckpt_id)
        finally:
            state_path.unlink(missing_ok=True)
            mem_path.unlink(missing_ok=True)
        h.data["last_checkpoint"] = ckpt_id
        mem_bytes = h.spec.memory_mb * 1024 * 1024
        return CheckpointManifest(
            id=ckpt_id, parent_id=parent.id if parent else None, sandbox_id=h.sandbox_id,
            runtime=self.name, spec=h.spec, memory_bytes=mem_bytes, page_size=PAGE,
            total_pages=mem_bytes // PAGE, nonzero_pages=layer.nonzero_pages,
            changed_pages=layer.changed_pages, new_pages=layer.new_pages,
            stored_bytes=layer.stored_bytes + disk_new,
            device_state_key=state_key, page_map_key=map_key, disk_keys={"rootfs": disk_key},
            runtime_data={"snapshot_type": "Diff" if diff else "Full"},
            stats={"downtime_ms": downtime * 1000, "total_ms": (time.perf_counter() - started) * 1000},
        )  # fmt: skip

    object_prefixes = ("pagestore/packs/", CHUNK_PREFIX, MAP_PREFIX, STATE_PREFIX)

    def referenced_keys(self, m: CheckpointManifest, store: ObjectStore) -> set[str]:
        keys = super().referenced_keys(m, store)
        keys.update(self._pagestores.referenced(store, m.page_map_key))
        disk_key = m.disk_keys.get("rootfs")
        if disk_key:
            keys.update(json.loads(zlib.decompress(store.get(disk_key)))["chunks"].values())
        return keys

    def forget_objects(self, keys: set[str]) -> None:
        self._pagestores.forget(keys)

    def _store_memory(
        self, mem_path: Path, parent: PageMap | None, store: ObjectStore, map_key: str
    ) -> LayerStats:
        """One layer of the page store (the microvm runtime's packs) from a snapshot's memory
        file. A Full snapshot holds all of memory; a Diff one only the pages dirtied since
        ``parent`` (its data extents), every other page is the parent's."""
        ps = self._pagestores.of(store)
        with open(mem_path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            if size % PAGE or not size:
                raise CheckpointError(f"snapshot memory file {mem_path} has {size} bytes")
            pages = np.memmap(f, dtype=np.uint8, mode="r", shape=(size // PAGE, PAGE))
            try:
                if parent is None:
                    hashes = file_page_hashes(f.fileno(), pages)
                else:
                    hashes = parent.hashes.copy()
                    for off, length in _data_extents(mem_path):
                        a, b = off // PAGE, -(-(off + length) // PAGE)
                        hashes[a:b] = page_hashes(pages[a:b])
                _, stats = ps.save_layer(pages, hashes, parent, map_key)
            finally:
                del pages
        return stats

    @staticmethod
    def _store_disk(rootfs: Path, store: ObjectStore, ckpt_id: str) -> tuple[str, int]:
        chunks: dict[str, str] = {}
        new_bytes = 0
        with open(rootfs, "rb") as f:
            for off, length in _data_extents(rootfs):
                f.seek(off)
                pos = off
                while pos < off + length:
                    data = f.read(min(DISK_CHUNK, off + length - pos))
                    if data.strip(b"\x00"):
                        key = store.content_key(data, CHUNK_PREFIX)
                        if not store.exists(key):
                            store.put(key, data)
                            new_bytes += len(data)
                        chunks[str(pos)] = key
                    pos += len(data)
        body = zlib.compress(json.dumps(
            {"size": rootfs.stat().st_size, "chunks": chunks}, separators=(",", ":")
        ).encode())  # fmt: skip
        key = f"{MAP_PREFIX}{ckpt_id}.disk.json.z"
        store.put(key, body)
        return key, new_bytes + len(body)

    def restore(
        self, sandbox_id: str, chain: list[CheckpointManifest], store: ObjectStore, workdir: Path
    ) -> VMHandle:
        ok, why = self.available()
        if not ok:
            raise RuntimeUnavailable(f"firecracker runtime unavailable: {why}")
        if not chain:
            raise CheckpointError("restore needs at least one checkpoint")
        top = chain[-1]
        if top.runtime != self.name or not top.device_state_key:
            raise UnsupportedOperation(f"checkpoint {top.id} is not a firecracker checkpoint")
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        gen = secrets.token_hex(3)
        mem_path, state_path = workdir / f"mem-{gen}", workdir / f"vmstate-{gen}"
        self._write_memory(mem_path, top, store)
        state_path.write_bytes(store.get(top.device_state_key))
        disk = json.loads(zlib.decompress(store.get(top.disk_keys["rootfs"])))
        rootfs = workdir / "rootfs.ext4"
        with open(rootfs, "wb") as f:
            f.truncate(disk["size"])
            for off, key in disk["chunks"].items():
                f.seek(int(off))
                f.write(store.get(key))
        vsock = workdir / f"vsock-{gen}.sock"
        api, proc = self._launch(sandbox_id, workdir, gen)  # type: ignore[arg-type]
        api.put("/snapshot/load", {
            "snapshot_path": str(state_path),
            "mem_backend": {"backend_type": "File", "backend_path": str(mem_path)},
            "track_dirty_pages": True, "resume_vm": True,
            "vsock_override": {"uds_path": str(vsock)},
        })  # fmt: skip
        h = VMHandle(
            sandbox_id=sandbox_id, runtime=self.name, workdir=workdir, spec=top.spec,
            pid=getattr(proc, "pid", None), restored_from=top.id,
            data={"api_sock": str(api.sock_path), "vsock": str(vsock), "gen": gen,
                  "rootfs": str(rootfs), "mem": str(mem_path)},
        )  # fmt: skip
        self._agent(h)
        return h

    def _write_memory(self, mem_path: Path, top: CheckpointManifest, store: ObjectStore) -> None:
        """The checkpoint's whole memory into a new sparse file (zero pages stay holes)."""
        ps = self._pagestores.of(store)
        page_map = ps.load_map(top.page_map_key or "")
        write_sparse_file(mem_path, top.memory_bytes)
        if page_map.npages * PAGE != top.memory_bytes:
            raise CheckpointError(f"checkpoint {top.id}: page map does not cover its memory")
        dst = np.memmap(mem_path, dtype=np.uint8, mode="r+", shape=(page_map.npages, PAGE))
        try:
            ps.materialize(page_map, dst)
            dst.flush()
        finally:
            del dst

    # -- guest operations, through the agent

    def exec(self, h: VMHandle, req: ExecRequest) -> ExecResult:
        return self._agent(h).exec(req)

    def exec_stream(self, h: VMHandle, req: ExecRequest) -> Iterator[ExecEvent]:
        return self._agent(h).exec_stream(req)

    def kill_process(self, h: VMHandle, pid: int, signal: int = 15) -> None:
        self._agent(h).kill_process(pid, signal)

    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        data = self._agent(h).read_file(path)
        if limit is not None and len(data) > limit:
            raise GuestFileTooLarge(f"{path} is larger than {limit} bytes", 27, path)
        return data

    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        return self._agent(h).write_file(path, data, mode)

    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        return self._agent(h).list_dir(path)

    def stat(self, h: VMHandle, path: str) -> FileInfo:
        return self._agent(h).stat(path)

    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        self._agent(h).remove(path, recursive)
