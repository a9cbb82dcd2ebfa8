"""The firecracker runtime against a fake Firecracker API socket (no binary exists here).

The fake speaks Firecracker's REST API over a unix socket the way the real one does for the
calls the runtime makes, records every request, writes snapshot files (a sparse memory file
holding the pages the test marks dirty) and opens the vsock UDS with the ``CONNECT``/``OK``
handshake. The tests assert the exact request sequence and bodies, and that page maps, Diff
layers and restores compose to the right memory image.
"""

from __future__ import annotations

import json
import os
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from services.sandbox.runtime.base import (
    ExecRequest,
    ExecResult,
    RuntimeUnavailable,
    SandboxSpec,
)
from services.sandbox.runtime.firecracker import PAGE, FirecrackerRuntime
from shared.objectstore import LocalObjectStore

MEM_MB = 64


class FakeVM:
    """One fake Firecracker process: API server + vsock UDS, and what it was asked."""

    def __init__(self, sock: Path, dirty: dict[int, bytes]) -> None:
        self.sock = sock
        self.requests: list[tuple[str, str, object]] = []
        self.dirty = dirty  # page index -> content the next snapshot writes
        self.alive = True
        self.pid = os.getpid()
        self._servers: list[socketserver.BaseServer] = []
        vm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # noqa: ANN002
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                vm.requests.append((self.command, self.path, body))
                status = vm.on_request(self.command, self.path, body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_PUT = do_PATCH = do_GET = _handle  # noqa: N815

        self._serve(socketserver.ThreadingUnixStreamServer(str(sock), Handler))

    def _serve(self, server: socketserver.BaseServer) -> None:
        server.daemon_threads = True  # type: ignore[attr-defined]
        self._servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def _open_vsock(self, path: str) -> None:
        class VsockHandler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline()
                if line == b"CONNECT 1024\n":
                    self.wfile.write(b"OK 5000\n")

        self._serve(socketserver.ThreadingUnixStreamServer(path, VsockHandler))

    def on_request(self, method: str, path: str, body: dict) -> int:
        if path == "/vsock":
            self._open_vsock(body["uds_path"])
        if path == "/snapshot/load":
            self._open_vsock(body["vsock_override"]["uds_path"])
            self.loaded_memory = Path(body["mem_backend"]["backend_path"]).read_bytes()
        if path == "/snapshot/create":
            Path(body["snapshot_path"]).write_bytes(
                b"device-state:" + str(len(self.requests)).encode()
            )
            with open(body["mem_file_path"], "wb") as f:
                f.truncate(MEM_MB * 1024 * 1024)
                for idx, content in self.dirty.items():
                    f.seek(idx * PAGE)
                    f.write(content)
        return 204

    # the process-like surface the runtime uses
    def poll(self):  # noqa: ANN201
        return None if self.alive else -9

    def kill(self) -> None:
        self.alive = False
        for s in self._servers:
            s.shutdown()
            s.server_close()

    def wait(self, timeout: float | None = None) -> int:
        return -9


class FakeAgent:
    def __init__(self, sock) -> None:  # noqa: ANN001
        self.sock = sock

    def exec(self, req: ExecRequest) -> ExecResult:
        return ExecResult(exit_code=0, stdout=" ".join(req.full_argv()))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def fc(tmp_path: Path):  # noqa: ANN201
    vms: list[FakeVM] = []
    dirty: dict[int, bytes] = {}

    def spawn(argv: list[str]) -> FakeVM:
        assert argv[0] == "/opt/fc/firecracker" and argv[1] == "--api-sock" and argv[3] == "--id"
        vm = FakeVM(Path(argv[2]), dirty)
        vms.append(vm)
        return vm

    (tmp_path / "vmlinux").write_bytes(b"kernel")
    (tmp_path / "kvm").write_bytes(b"")
    image = tmp_path / "busybox.ext4"
    with open(image, "wb") as f:
        f.truncate(1024 * 1024)
        f.seek(8192)
        f.write(b"superblock")
    rt = FirecrackerRuntime(
        tmp_path / "fc", binary="/opt/fc/firecracker", kernel=tmp_path / "vmlinux",
        images={"busybox": image}, spawn=spawn, agent_connector=FakeAgent,
        kvm_device=tmp_path / "kvm",
    )  # fmt: skip
    store = LocalObjectStore(tmp_path / "objects")
    yield rt, vms, dirty, store, tmp_path
    for vm in vms:
        if vm.alive:
            vm.kill()


def test_unavailable_without_binary_or_kvm(tmp_path: Path) -> None:
    rt = FirecrackerRuntime(tmp_path, binary=None)
    rt.binary = None
    ok, why = rt.available()
    assert not ok and "firecracker binary not on PATH" in why
    with pytest.raises(RuntimeUnavailable, match="firecracker"):
        rt.create("s", SandboxSpec(), tmp_path / "w")
    rt = FirecrackerRuntime(tmp_path, binary="/bin/true", kvm_device=tmp_path / "nokvm")
    assert "KVM" in rt.available()[1]


def test_create_sends_the_boot_sequence(fc) -> None:  # noqa: ANN001
    rt, vms, _, _, tmp = fc
    h = rt.create("sbx-1", SandboxSpec(cpu=2, memory_mb=MEM_MB), tmp / "w1")
    work = tmp / "w1"
    assert vms[0].requests == [
        ("PUT", "/machine-config", {"vcpu_count": 2, "mem_size_mib": MEM_MB, "track_dirty_pages": True}),
        ("PUT", "/boot-source", {"kernel_image_path": str(tmp / "vmlinux"),
                                 "boot_args": "console=ttyS0 reboot=k panic=1 pci=off quiet init=/init"}),
        ("PUT", "/drives/rootfs", {"drive_id": "rootfs", "path_on_host": str(work / "rootfs.ext4"),
                                   "is_root_device": True, "is_read_only": False}),
        ("PUT", "/vsock", {"guest_cid": 3, "uds_path": str(work / "vsock-0.sock")}),
        ("PUT", "/actions", {"action_type": "InstanceStart"}),
    ]  # fmt: skip
    assert (work / "rootfs.ext4").read_bytes()[8192:8202] == b"superblock"
    assert rt.is_alive(h)
    assert rt.exec(h, ExecRequest(argv=["echo", "hi"])).stdout == "echo hi"
    rt.stop(h)
    assert not rt.is_alive(h) and not vms[0].alive


def test_full_then_diff_checkpoints_and_restore_compose_memory(fc) -> None:  # noqa: ANN001
    rt, vms, dirty, store, tmp = fc
    h = rt.create("sbx-1", SandboxSpec(memory_mb=MEM_MB), tmp / "w1")
    vm = vms[0]
    dirty.update({0: b"a" * PAGE, 5: b"b" * PAGE, 9: bytes(PAGE)})  # page 9 is zero: free
    vm.requests.clear()
    a = rt.checkpoint(h, None, store)
    assert vm.requests == [
        ("PATCH", "/vm", {"state": "Paused"}),
        ("PUT", "/snapshot/create", {"snapshot_type": "Full",
                                     "snapshot_path": str(tmp / "w1" / f"{a.id}.vmstate"),
                                     "mem_file_path": str(tmp / "w1" / f"{a.id}.mem")}),
        ("PATCH", "/vm", {"state": "Resumed"}),
    ]  # fmt: skip
    assert (a.nonzero_pages, a.new_pages, a.parent_id) == (2, 2, None)
    assert a.runtime_data["snapshot_type"] == "Full"

    dirty.clear()
    dirty.update({5: b"c" * PAGE, 7: b"a" * PAGE})  # 7 repeats page 0's content: stored once
    vm.requests.clear()
    b = rt.checkpoint(h, a, store)
    assert vm.requests[1][2]["snapshot_type"] == "Diff"
    assert b.parent_id == a.id and b.changed_pages == 2 and b.new_pages == 1
    assert b.nonzero_pages == 3
    assert b.stored_bytes < a.stored_bytes, "a Diff layer stores only new pages"
    assert not list((tmp / "w1").glob("ckpt-*")), "snapshot files are removed once stored"
    # memory lives in the page store every runtime uses (packs), not one object per page
    packs = [o.key for o in store.list("pagestore/packs/")]
    assert len(packs) == 4 and not list(store.list("sandbox/pages/"))  # a's pack and b's
    assert rt.referenced_keys(b, store) >= set(packs)

    h2 = rt.restore("sbx-2", [a, b], store, tmp / "w2")
    new_vm = vms[-1]
    load = new_vm.requests[0]
    assert load[0:2] == ("PUT", "/snapshot/load")
    assert load[2]["track_dirty_pages"] is True and load[2]["resume_vm"] is True
    assert load[2]["mem_backend"]["backend_type"] == "File"
    assert load[2]["vsock_override"]["uds_path"] == h2.data["vsock"]
    mem = new_vm.loaded_memory
    assert len(mem) == MEM_MB * 1024 * 1024
    page = lambda i: mem[i * PAGE : (i + 1) * PAGE]  # noqa: E731
    assert page(0) == b"a" * PAGE and page(5) == b"c" * PAGE and page(7) == b"a" * PAGE
    assert page(1) == bytes(PAGE)
    assert h2.restored_from == b.id

    h3 = rt.restore("sbx-3", [a], store, tmp / "w3")
    mem_a = vms[-1].loaded_memory
    assert mem_a[5 * PAGE : 6 * PAGE] == b"b" * PAGE and mem_a[7 * PAGE : 8 * PAGE] == bytes(PAGE)

    # A restored VM's next checkpoint is a Diff over the checkpoint it came from.
    dirty.clear()
    dirty.update({3: b"d" * PAGE})
    c = rt.checkpoint(h3, a, store)
    assert vms[-1].requests[-2][2]["snapshot_type"] == "Diff" and c.nonzero_pages == 3
    for x in (h, h2, h3):
        rt.destroy(x)
    assert not (tmp / "w2").exists()


def test_api_errors_carry_firecrackers_message(fc) -> None:  # noqa: ANN001
    from services.sandbox.runtime.firecracker import FirecrackerAPI, FirecrackerAPIError

    rt, vms, _, _, tmp = fc
    rt.create("sbx-1", SandboxSpec(memory_mb=MEM_MB), tmp / "w1")
    vm = vms[0]
    original = vm.on_request

    def failing(method, path, body):  # noqa: ANN001, ANN202
        return 400 if path == "/snapshot/create" else original(method, path, body)

    vm.on_request = failing  # type: ignore[method-assign]
    with pytest.raises(FirecrackerAPIError, match="/snapshot/create: 400"):
        FirecrackerAPI(vm.sock).put("/snapshot/create", {})
