"""The ``microvm`` runtime: QEMU ``-M microvm`` sandboxes with incremental memory checkpoints.

How a sandbox is laid out on the host:

* **Guest RAM** is a ``memory-backend-file`` with ``share=on`` on a sparse file in
  ``/dev/shm/k3stack`` (tmpfs). QEMU and this process map the same file, so the runtime reads
  guest memory without copying it out of QEMU, and pages the guest never touched stay holes.
* **Files** live in the guest's initramfs root (a tmpfs, i.e. guest RAM), so a memory
  checkpoint captures files and processes together (busybox image: no disk).
* **Disks** (Debian image): a read-only qcow2 base shared by every sandbox of the image, and a
  private qcow2 overlay per sandbox in its workdir. A checkpoint, with the vCPUs stopped (QEMU
  has drained and flushed the disk), seals the overlay with QMP ``blockdev-snapshot-sync`` (the
  guest writes on into a fresh overlay on top) and stores the sealed one content-addressed
  (``disks/<sha256>``): each checkpoint stores only the disk blocks written since its parent,
  consistent with the memory captured at the same instant. Restore/fork fetch the layers once
  into a shared read-only cache (``<root>/layers``) and give each new sandbox its own overlay.
* **Network**: none by default. ``allowlist``: ``-netdev user,restrict=on`` (the guest reaches
  nothing through it) plus one ``guestfwd`` per allowed ``host:port``, reachable in the guest at
  ``10.0.2.(100+i):port`` (and by name through ``/etc/hosts``); see :meth:`guest_addresses`.
* **Device state** (CPU registers, virtio queues, timers) is saved with QMP
  ``xen-save-devices-state`` (device sections only, no RAM: ~1 ms) and loaded with
  ``xen-load-devices-state`` into a QEMU started with ``-incoming defer`` (so that QEMU does not
  write the kernel/initrd ROMs over the restored RAM at reset). Despite the name these commands
  are generic QEMU savevm code, not Xen-specific.
* The **guest agent** (``guest/agent.c``) answers on a virtio-serial port whose host end is a
  unix socket of QEMU; :class:`~services.sandbox.guest.protocol.AgentClient` speaks to it.

Checkpoint (VM keeps running afterwards): hold the agent gate -> ``stop`` -> save device state
-> hash every data page of the memory file natively (holes skipped) -> compare with the
parent's page hashes -> store changed non-zero pages content-addressed
(:class:`~services.sandbox.pagestore.PageStore`) -> ``cont``. Restore: new sparse memory file,
write the checkpoint's non-zero pages into it, start (or take from the warm pool) a QEMU waiting
with ``-incoming defer`` on that file, load the device state, ``cont``, resynchronise the agent.

Acceleration: KVM when a boot probe on this host shows it works (``/dev/kvm`` on these machines
is a nested PVM that fails on stock guest kernels), else TCG; the probe result is cached per
QEMU/kernel/host-kernel version (``accel.json`` in the sandbox cache). Override with
``K3STACK_SANDBOX__ACCEL=tcg|kvm``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from services.sandbox.guest.protocol import AgentClient
from services.sandbox.images.builder import (
    Image,
    _static_busybox,
    get_image,
    sandbox_cache_dir,
)
from services.sandbox.pagestore import PAGE_SIZE, PageMap, PageStore, file_page_hashes
from services.sandbox.runtime.base import (
    CheckpointError,
    CheckpointManifest,
    ExecEvent,
    ExecRequest,
    ExecResult,
    FileInfo,
    GuestAgentError,
    Runtime,
    RuntimeCapabilities,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxSpec,
    UnsupportedOperation,
    VMHandle,
)
from services.sandbox.runtime.microvm.qmp import QMPClient, QMPError
from shared.settings import get_settings

log = logging.getLogger(__name__)

QEMU = "qemu-system-x86_64"
SETUP_HINT = "run scripts/setup_sandbox.sh"
KERNEL_CMDLINE = "console=ttyS0 quiet panic=-1 init_on_free=1 tsc=reliable"
"""``init_on_free=1``: freed guest pages are zeroed, so they cost nothing in checkpoints.
``tsc=reliable`` plus ``tsc_early_khz`` (added per host, :func:`_host_tsc_khz`): under TCG the
guest TSC ticks at the host's rate, and on a loaded host the PIT calibration fails and the guest
stalls without a clocksource; telling the kernel the frequency skips the calibration."""


def _host_tsc_khz() -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/sys/devices/system/cpu/cpu0/tsc_freq_khz").read_text())
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    return None


BOOT_TIMEOUT_S = 90.0


def _shm_dir() -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
    d = base / "k3stack"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _short_dir(tag: str) -> Path:
    """A directory with a short path for unix sockets (108-byte limit)."""
    d = Path("/tmp/k3s") / tag
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class _Live:
    """Per-sandbox state of this process (not persisted): connections and caches."""

    proc: subprocess.Popen | None
    qmp: QMPClient
    agent: AgentClient
    mem_fd: int
    mem_map: mmap.mmap
    pages: np.ndarray
    last_map: tuple[str, PageMap] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    disk: _Disk | None = None
    ports: dict[int, str] = field(default_factory=dict)
    pid: int | None = None


@dataclass
class _Disk:
    """A sandbox's disk: the active qcow2 overlay and the sealed layers it sits on.

    ``layers`` are content hashes (object store ``disks/<sha>``) from the base upwards; each
    checkpoint seals the active overlay (QEMU switches writes to a fresh one on top) and
    appends it. ``files`` are this sandbox's local qcow2 files, active one last."""

    base: Path
    active: Path
    layers: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


@dataclass
class _Vm:
    """A started QEMU (from the pool or fresh), before it belongs to a sandbox."""

    proc: subprocess.Popen
    sock_dir: Path
    mem_path: Path
    qmp: QMPClient
    key: tuple
    disk: Path | None = None


def missing_runtime_files() -> list[str]:
    """Sources the runtime compiles or copies at run time that this installation lacks (a
    wheel built without them boots nothing, so the probe says so instead of picking microvm)."""
    from services.sandbox.images.builder import GUEST_DIR
    from services.sandbox.pagestore.hashing import _SRC as PAGEHASH_SRC

    needed = (GUEST_DIR / "agent.c", GUEST_DIR / "init.sh", PAGEHASH_SRC)
    return [str(p) for p in needed if not p.is_file()]


class MicroVMRuntime(Runtime):
    """QEMU microvm sandboxes (see module docstring)."""

    name = "microvm"
    capabilities = RuntimeCapabilities(memory_checkpoint=True, fork=True, network_allowlist=True)

    def __init__(
        self,
        root: Path | None = None,
        accel: str | None = None,
        pool_size: int = 0,
        pids_max: int = 1024,
    ) -> None:
        """``accel``: ``kvm``, ``tcg``, or None/``auto`` (a boot probe decides); ``pids_max``:
        processes the guest's commands may have at once (the agent's cgroup limit)."""
        self.root = Path(root) if root else sandbox_cache_dir() / "vms"
        self._accel = None if accel in (None, "auto") else accel
        self.pids_max = pids_max
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self._pagestores: dict[int, PageStore] = {}
        self.pool_size = pool_size
        self._pool: list[_Vm] = []
        self._pool_lock = threading.Lock()

    # ------------------------------------------------------------------ availability

    def available(self) -> tuple[bool, str]:
        qemu = shutil.which(QEMU)
        if not qemu:
            return False, f"{QEMU} not on PATH: {SETUP_HINT}"
        try:
            from services.sandbox.images.builder import find_kernel

            k = find_kernel()
        except RuntimeUnavailable as exc:
            return False, str(exc)
        if not shutil.which("gcc"):
            return False, f"gcc not found (builds the guest agent): {SETUP_HINT}"
        missing = missing_runtime_files()
        if missing:
            return False, f"files missing from this installation: {', '.join(missing)}"
        return True, f"{qemu}, kernel {k.version}, accel {self._accel or 'auto (probe)'}"

    def _require(self) -> None:
        ok, why = self.available()
        if not ok:
            raise RuntimeUnavailable(f"microvm runtime unavailable: {why}")

    @property
    def accel(self) -> str:
        if self._accel is None:
            self._accel = self._probe_accel()
        return self._accel

    def _probe_accel(self) -> str:
        """``kvm`` if a KVM boot of the busybox image answers, else ``tcg`` (cached)."""
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            return "tcg"
        ver = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout
        image = get_image("busybox")
        key = f"{ver.splitlines()[0] if ver else '?'}|{image.kernel.version}|{platform.release()}"
        cache = sandbox_cache_dir() / "accel.json"
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(cache.read_text())
            if data.get("key") == key:
                return data["accel"]
        accel = "tcg"
        try:
            vm = self._launch(image, SandboxSpec(), "kvm", incoming=False, boot_timeout=20)
            try:
                agent = self._connect_agent(vm.sock_dir / "agent.sock", timeout_s=20)
                agent.ping()
                agent.close()
                accel = "kvm"
            finally:
                self._kill_vm(vm.proc, vm.qmp, vm.mem_path)
                shutil.rmtree(vm.sock_dir, ignore_errors=True)
        except Exception as exc:  # noqa: BLE001 - any failure means "not usable"
            log.info("KVM boot probe failed (%s)", str(exc).splitlines()[0][:200])
        if accel == "tcg":
            log.warning("microvm: /dev/kvm does not boot the guest kernel here; using TCG")
        with contextlib.suppress(OSError):
            cache.write_text(json.dumps({"key": key, "accel": accel}))
        return accel

    # ------------------------------------------------------------------ QEMU processes

    def _cmdline(self, image: Image, spec: SandboxSpec, accel: str, sock_dir: Path,
                 mem_path: Path, incoming: bool, disk: Path | None = None) -> list[str]:  # fmt: skip
        mem = spec.memory_mb
        args = [
            QEMU,
            "-M", "microvm,x-option-roms=off,rtc=off,isa-serial=on",
            "-accel", accel,
            "-cpu", "host" if accel == "kvm" else "max",
            "-smp", str(spec.cpu),
            "-m", f"{mem}M",
            "-object", f"memory-backend-file,id=mem,size={mem}M,mem-path={mem_path},share=on",
            "-machine", "memory-backend=mem",
            "-nodefaults", "-no-user-config", "-nographic", "-display", "none", "-no-reboot",
            "-kernel", str(image.kernel.vmlinuz),
            "-initrd", str(image.initrd),
            "-append", self._kernel_cmdline(image, accel, self.pids_max),
            "-serial", f"file:{sock_dir / 'console.log'}",
            "-device", "virtio-serial-device",
            "-chardev", f"socket,id=agent,path={sock_dir / 'agent.sock'},server=on,wait=off",
            "-device", "virtserialport,chardev=agent,name=k3s.agent",
            "-qmp", f"unix:{sock_dir / 'qmp.sock'},server=on,wait=off",
        ]  # fmt: skip
        if disk is not None:
            args += [
                "-drive", f"file={disk},if=none,id=disk0,format=qcow2,cache=writeback",
                "-device", "virtio-blk-device,drive=disk0",
            ]  # fmt: skip
        if spec.network.mode == "allowlist":
            args += ["-netdev", "user,id=net0,restrict=on" + "".join(self._guestfwds(spec))]
            args += ["-device", "virtio-net-device,netdev=net0"]
        if incoming:
            # xen-save-devices-state writes no configuration section; do not expect one
            args += ["-incoming", "defer", "-global", "migration.send-configuration=off"]
        return args

    @staticmethod
    def guest_addresses(spec: SandboxSpec) -> dict[str, str]:
        """Where the guest reaches each allowed destination: ``host:port`` -> ``10.0.2.N:port``.

        The user-mode network runs with ``restrict=on`` (the guest can reach nothing on the
        host or beyond), and each allowed destination gets a ``guestfwd``: a guest TCP
        connection to ``10.0.2.(100+i):port`` is piped by QEMU to ``host:port`` on the host
        side. Host names are also put in the guest's ``/etc/hosts``."""
        out = {}
        for i, dest in enumerate(spec.network.allow):
            port = dest.rsplit(":", 1)[1]
            out[dest] = f"10.0.2.{100 + i}:{port}"
        return out

    @staticmethod
    def _guestfwds(spec: SandboxSpec) -> list[str]:
        nc = shutil.which("nc")
        connector = nc if nc else f"{_static_busybox()} nc"
        fwds = []
        for dest, guest in MicroVMRuntime.guest_addresses(spec).items():
            host, port = dest.rsplit(":", 1)
            host = host.strip("[]")
            if any(c in host for c in ", ;|&$`'\"\\"):
                raise ValueError(
                    f"network allow entry {dest!r} has characters not allowed in a host"
                )
            fwds.append(f",guestfwd=tcp:{guest}-cmd:{connector} {host} {int(port)}")
        return fwds

    @staticmethod
    def _kernel_cmdline(image: Image, accel: str, pids_max: int = 1024) -> str:
        cmdline = f"{KERNEL_CMDLINE} k3s.pids_max={pids_max}"
        khz = _host_tsc_khz() if accel == "tcg" else None
        if khz:
            cmdline += f" tsc_early_khz={khz}"
        return cmdline + (" " + image.cmdline if image.cmdline else "")

    def _launch(self, image: Image, spec: SandboxSpec, accel: str, incoming: bool,
                boot_timeout: float = 10.0, disk: Path | None = None) -> _Vm:  # fmt: skip
        tag = uuid.uuid4().hex[:12]
        sock_dir = _short_dir(tag)
        mem_path = _shm_dir() / f"{tag}.mem"
        with open(mem_path, "wb") as fh:
            fh.truncate(spec.memory_mb << 20)
        cmd = self._cmdline(image, spec, accel, sock_dir, mem_path, incoming, disk)
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(sock_dir / "qemu.err", "wb"),  # noqa: SIM115 - owned by the child
            start_new_session=True,
        )
        try:
            qmp = QMPClient(str(sock_dir / "qmp.sock"), timeout_s=boot_timeout)
        except OSError as exc:
            proc.kill()
            proc.wait()
            err = (sock_dir / "qemu.err").read_text(errors="replace")[-2000:]
            mem_path.unlink(missing_ok=True)
            raise RuntimeUnavailable(f"QEMU did not start: {exc}: {err}") from exc
        key = (spec.memory_mb, spec.cpu, accel, spec.network.model_dump_json(), image.initrd)
        return _Vm(proc=proc, sock_dir=sock_dir, mem_path=mem_path, qmp=qmp, key=key, disk=disk)

    def _connect_agent(self, path: Path, timeout_s: float) -> AgentClient:
        deadline = time.monotonic() + timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
                break
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    raise GuestAgentError(f"agent socket {path} did not appear") from None
                time.sleep(0.005)
        client = AgentClient(sock)
        client.sync(timeout_s=max(1.0, deadline - time.monotonic()), retry_s=0.2)
        return client

    @staticmethod
    def _kill_vm(proc: subprocess.Popen | None, qmp: QMPClient | None, mem_path: Path | None):
        if qmp is not None:
            with contextlib.suppress(Exception):
                qmp.execute("quit", timeout_s=2)
            with contextlib.suppress(Exception):
                qmp.close()
        if proc is not None:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if mem_path is not None:
            with contextlib.suppress(OSError):
                mem_path.unlink()

    # ------------------------------------------------------------------ warm pool

    def _take_vm(self, image: Image, spec: SandboxSpec, accel: str,
                 disk: Path | None = None) -> _Vm:  # fmt: skip
        if disk is not None:  # a disk is per sandbox: a pooled QEMU cannot have it yet
            return self._launch(image, spec, accel, incoming=True, disk=disk)
        key = (spec.memory_mb, spec.cpu, accel, spec.network.model_dump_json(), image.initrd)
        with self._pool_lock:
            for i, vm in enumerate(self._pool):
                if vm.key == key and vm.proc.poll() is None:
                    self._pool.pop(i)
                    break
            else:
                vm = None
        if self.pool_size:
            threading.Thread(target=self._refill, args=(image, spec, accel), daemon=True).start()
        return vm or self._launch(image, spec, accel, incoming=True)

    def _refill(self, image: Image, spec: SandboxSpec, accel: str) -> None:
        key = (spec.memory_mb, spec.cpu, accel, spec.network.model_dump_json(), image.initrd)
        with self._pool_lock:
            have = sum(1 for v in self._pool if v.key == key)
        for _ in range(self.pool_size - have):
            vm = self._launch(image, spec, accel, incoming=True)
            with self._pool_lock:
                self._pool.append(vm)

    def prewarm(self, spec: SandboxSpec | None = None) -> None:
        """Fill the warm pool for ``spec`` now (QEMUs waiting with ``-incoming defer``)."""
        spec = spec or SandboxSpec()
        image = get_image(spec.image)
        if image.disk is None:
            self._refill(image, spec, self.accel)

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, []
        for vm in pool:
            self._kill_vm(vm.proc, vm.qmp, vm.mem_path)
            shutil.rmtree(vm.sock_dir, ignore_errors=True)

    # ------------------------------------------------------------------ lifecycle

    def _attach(self, vm: _Vm, agent: AgentClient) -> _Live:
        fd = os.open(vm.mem_path, os.O_RDWR)
        size = os.fstat(fd).st_size
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        pages = np.frombuffer(mm, dtype=np.uint8).reshape(-1, PAGE_SIZE)
        live = _Live(proc=vm.proc, qmp=vm.qmp, agent=agent, mem_fd=fd, mem_map=mm, pages=pages)
        live.pid = vm.proc.pid
        return live

    def _handle(self, sandbox_id: str, spec: SandboxSpec, workdir: Path, vm: _Vm,
                accel: str, restored_from: str | None = None) -> VMHandle:  # fmt: skip
        return VMHandle(
            sandbox_id=sandbox_id,
            runtime=self.name,
            workdir=workdir,
            spec=spec,
            pid=vm.proc.pid,
            restored_from=restored_from,
            data={
                "sock_dir": str(vm.sock_dir),
                "mem_path": str(vm.mem_path),
                "accel": accel,
                "image_initrd": str(vm.key[4]),
                **({"disk": str(vm.disk)} if vm.disk else {}),
                **(
                    {"network": self.guest_addresses(spec)}
                    if spec.network.mode == "allowlist"
                    else {}
                ),
            },
        )

    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        self._require()
        image = get_image(spec.image)
        accel = self.accel
        workdir.mkdir(parents=True, exist_ok=True)
        disk = self._new_overlay(workdir, image.disk) if image.disk else None
        vm = self._launch(image, spec, accel, incoming=False, disk=disk.active if disk else None)
        try:
            agent = self._connect_agent(vm.sock_dir / "agent.sock", BOOT_TIMEOUT_S)
        except Exception:
            console = (vm.sock_dir / "console.log").read_text(errors="replace")[-1500:]
            self._kill_vm(vm.proc, vm.qmp, vm.mem_path)
            if disk:
                self._remove_disk(disk)
            raise GuestAgentError(f"guest did not boot; console tail:\n{console}") from None
        h = self._handle(sandbox_id, spec, workdir, vm, accel)
        live = self._attach(vm, agent)
        live.disk = disk
        self._install(sandbox_id, live)
        if spec.network.mode == "allowlist":
            self._write_hosts(h)
        return h

    def _write_hosts(self, h: VMHandle) -> None:
        lines = ["127.0.0.1 localhost sandbox"]
        for dest, guest in self.guest_addresses(h.spec).items():
            host = dest.rsplit(":", 1)[0].strip("[]")
            if not host.replace(".", "").isdigit() and ":" not in host and host != "localhost":
                lines.append(f"{guest.rsplit(':', 1)[0]} {host}")
        self.write_file(h, "/etc/hosts", ("\n".join(lines) + "\n").encode())

    def _install(self, sandbox_id: str, live: _Live) -> None:
        """Record ``live`` as the sandbox's connection, releasing any entry it replaces (a VM
        that died unnoticed keeps its memory mapping and file otherwise)."""
        with self._lock:
            old = self._live.pop(sandbox_id, None)
            self._live[sandbox_id] = live
        if old is not None and old is not live:
            self._release(old, None)

    def _release(self, live: _Live, mem_path: Path | None) -> None:
        """End a live entry's QEMU (if still running) and free its mapping, fd and file."""
        live.agent.close()
        self._kill_vm(live.proc, live.qmp, mem_path)
        if live.proc is None and live.pid:  # adopted: not our child, signal it by pid
            with contextlib.suppress(OSError):
                if Path(f"/proc/{live.pid}/cmdline").read_bytes().startswith(QEMU.encode()):
                    os.kill(live.pid, signal.SIGKILL)
        live.pages = None  # type: ignore[assignment]  # drop the buffer export: the map can close
        live.last_map = None
        with contextlib.suppress(Exception):
            live.mem_map.close()
        with contextlib.suppress(OSError):
            os.close(live.mem_fd)

    def adopt(self, h: VMHandle) -> bool:
        """Re-attach to a QEMU a previous service process started: its QMP and agent sockets
        accept a new client once the old one is gone, and the memory file is still there.
        Sandboxes with a disk are not adopted (their overlay chain is not in the handle):
        the manager recovers them from their last checkpoint instead."""
        if h.data.get("disk") or not self.is_alive(h):
            return False
        sock_dir = Path(h.data.get("sock_dir", ""))
        mem_path = Path(h.data.get("mem_path", ""))
        if not sock_dir.is_dir() or not mem_path.is_file():
            return False
        qmp = None
        try:
            qmp = QMPClient(str(sock_dir / "qmp.sock"), timeout_s=10)
            status = (qmp.execute("query-status") or {}).get("status")
            if status == "paused":  # the service died mid-checkpoint, with the vCPUs stopped
                qmp.execute("cont")
            agent = self._connect_agent(sock_dir / "agent.sock", timeout_s=30)
        except Exception as exc:  # noqa: BLE001 - any failure means "recover instead"
            log.warning("adopting sandbox %s failed: %s", h.sandbox_id, exc)
            if qmp is not None:
                with contextlib.suppress(Exception):
                    qmp.close()
            return False
        fd = os.open(mem_path, os.O_RDWR)
        mm = mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        pages = np.frombuffer(mm, dtype=np.uint8).reshape(-1, PAGE_SIZE)
        live = _Live(proc=None, qmp=qmp, agent=agent, mem_fd=fd, mem_map=mm, pages=pages)
        live.pid = h.pid
        self._install(h.sandbox_id, live)
        return True

    def _live_of(self, h: VMHandle) -> _Live:
        with self._lock:
            live = self._live.get(h.sandbox_id)
        if live is None or not self._running(live):
            raise SandboxNotRunning(f"sandbox {h.sandbox_id} is not running")
        return live

    @staticmethod
    def _running(live: _Live) -> bool:
        if live.proc is not None:
            return live.proc.poll() is None
        try:  # adopted from a previous service process: not our child
            return Path(f"/proc/{live.pid}/cmdline").read_bytes().startswith(QEMU.encode())
        except OSError:
            return False

    def is_alive(self, h: VMHandle) -> bool:
        with self._lock:
            live = self._live.get(h.sandbox_id)
        if live is not None:
            return self._running(live)
        if h.pid:  # a handle from a previous service process
            try:
                os.kill(h.pid, 0)
                return Path(f"/proc/{h.pid}/cmdline").read_bytes().startswith(QEMU.encode())
            except OSError:
                return False
        return False

    def stop(self, h: VMHandle) -> None:
        with self._lock:
            live = self._live.pop(h.sandbox_id, None)
        mem_path = Path(h.data.get("mem_path", "")) if h.data.get("mem_path") else None
        if live is not None:
            self._release(live, None)
        elif h.pid and self.is_alive(h):  # left over from a previous service process
            with contextlib.suppress(OSError):
                os.kill(h.pid, signal.SIGKILL)
        if mem_path is not None:
            mem_path.unlink(missing_ok=True)
        if live is not None and live.disk is not None:
            self._remove_disk(live.disk)
        elif h.data.get("disk"):  # a previous service process's sandbox
            shutil.rmtree(Path(h.data["disk"]).parent, ignore_errors=True)
        if h.data.get("sock_dir"):
            shutil.rmtree(h.data["sock_dir"], ignore_errors=True)

    def destroy(self, h: VMHandle) -> None:
        self.stop(h)
        shutil.rmtree(h.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ disks

    @staticmethod
    def _qemu_img(*args: str) -> None:
        res = subprocess.run(["qemu-img", *args], capture_output=True, text=True)
        if res.returncode != 0:
            raise CheckpointError(f"qemu-img {args[0]} failed: {res.stderr.strip()[-500:]}")

    def _new_overlay(self, workdir: Path, backing: Path, layers: list[str] | None = None) -> _Disk:
        """A private qcow2 overlay over ``backing`` in a fresh folder of ``workdir``."""
        if not backing.is_file():
            raise RuntimeUnavailable(f"disk image {backing} is missing: {SETUP_HINT}")
        folder = workdir / f"disk-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True)
        active = folder / "overlay-0.qcow2"
        self._qemu_img(
            "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(backing), str(active)
        )
        return _Disk(base=backing, active=active, layers=list(layers or []), files=[active])

    @staticmethod
    def _file_id(path: Path) -> str:
        """Identity of a read-only base image (size and mtime: a rebuild changes it)."""
        st = path.stat()
        return f"{st.st_size}:{st.st_mtime_ns}"

    @staticmethod
    def _remove_disk(disk: _Disk) -> None:
        shutil.rmtree(disk.active.parent, ignore_errors=True)

    def _seal_disk(self, live: _Live) -> Path:
        """Switch the VM's writes to a new overlay on top of the active one (VM stopped: QEMU
        has drained and flushed the disk, so the old overlay now holds exactly the disk as of
        this instant, and is never written again). Returns the sealed file."""
        disk = live.disk
        assert disk is not None
        sealed = disk.active
        new = sealed.with_name(f"overlay-{len(disk.files)}.qcow2")
        live.qmp.execute(
            "blockdev-snapshot-sync", device="disk0", **{"snapshot-file": str(new)}, format="qcow2"
        )
        disk.active = new
        disk.files.append(new)
        return sealed

    @staticmethod
    def _store_layer(store, path: Path) -> tuple[str, int]:
        """Store a sealed overlay content-addressed (``disks/<sha256>``); bytes newly stored."""
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        sha = h.hexdigest()
        key = f"disks/{sha}"
        if store.exists(key):
            return sha, 0
        store.put_file(key, path)
        return sha, path.stat().st_size

    def _materialize_disk(self, disk_info: dict, store, workdir: Path) -> _Disk:
        """A private overlay over a checkpoint's sealed layers (fetched once into a shared,
        read-only local cache ``<root>/layers``, their backing links pointed at that cache)."""
        base = Path(disk_info["base"])
        if not base.is_file():
            raise CheckpointError(f"base disk {base} of this checkpoint is missing: {SETUP_HINT}")
        if disk_info.get("base_id") and disk_info["base_id"] != self._file_id(base):
            raise CheckpointError(
                f"base disk {base} was rebuilt since this checkpoint; its disk layers no longer apply"
            )
        ldir = self.root / "layers"
        ldir.mkdir(parents=True, exist_ok=True)
        prev = base
        for sha in disk_info.get("layers", []):
            path = ldir / f"{sha}.qcow2"
            if not path.exists():
                tmp = ldir / f".{sha}.{uuid.uuid4().hex[:8]}.part"
                try:
                    store.get_file(f"disks/{sha}", tmp)
                    self._qemu_img(
                        "rebase", "-u", "-f", "qcow2", "-b", str(prev), "-F", "qcow2", str(tmp)
                    )
                    tmp.chmod(0o444)
                    os.replace(tmp, path)
                except KeyError as exc:
                    raise CheckpointError(f"disk layer {sha} is not in the store") from exc
                finally:
                    tmp.unlink(missing_ok=True)
            prev = path
        return self._new_overlay(workdir, prev, disk_info.get("layers", []))

    # ------------------------------------------------------------------ checkpoints

    def _pagestore(self, store) -> PageStore:
        with self._lock:
            ps = self._pagestores.get(id(store))
            if ps is None or ps.store is not store:
                ps = self._pagestores[id(store)] = PageStore(store)
            return ps

    # ------------------------------------------------------------------ garbage collection

    object_prefixes = ("checkpoints/", "pagestore/packs/", "disks/")

    def referenced_keys(self, m: CheckpointManifest, store) -> set[str]:
        keys = super().referenced_keys(m, store)
        if m.page_map_key:
            ps = self._pagestore(store)
            for pack in ps.load_map(m.page_map_key).packs:
                keys.add(f"{ps.prefix}packs/{pack}.pages")
                keys.add(f"{ps.prefix}packs/{pack}.keys")
        for sha in (m.runtime_data.get("disk") or {}).get("layers", []):
            keys.add(f"disks/{sha}")
        return keys

    def forget_objects(self, keys: set[str]) -> None:
        with self._lock:
            stores = list(self._pagestores.values())
        for ps in stores:
            pfx = f"{ps.prefix}packs/"
            packs = {k[len(pfx) :].rsplit(".", 1)[0] for k in keys if k.startswith(pfx)}
            if packs:
                ps.forget_packs(packs)

    def collect_local(self, referenced: set[str], grace_s: float) -> tuple[int, int]:
        """Drop cached disk layers (``<root>/layers/<sha>.qcow2``) no reachable checkpoint
        names. A running VM that still has one open keeps reading it (the inode lives on)."""
        ldir = self.root / "layers"
        if not ldir.is_dir():
            return 0, 0
        files = freed = 0
        cutoff = time.time() - grace_s
        for path in ldir.glob("*.qcow2"):
            sha = path.name[: -len(".qcow2")]
            if f"disks/{sha}" in referenced:
                continue
            try:
                st = path.stat()
                if st.st_mtime > cutoff:
                    continue
                path.unlink()
            except FileNotFoundError:
                continue
            files += 1
            freed += st.st_size
        return files, freed

    def checkpoint(self, h: VMHandle, parent: CheckpointManifest | None, store) -> CheckpointManifest:  # fmt: skip
        live = self._live_of(h)
        ps = self._pagestore(store)
        ck_id = uuid.uuid4().hex
        prefix = f"checkpoints/{h.sandbox_id}/{ck_id}"
        stats: dict[str, float] = {}
        t0 = time.perf_counter()
        parent_map = None
        if parent is not None:
            if parent.memory_bytes != h.spec.memory_mb << 20:
                raise CheckpointError(f"parent {parent.id} has a different memory size")
            if live.last_map and live.last_map[0] == parent.id:
                parent_map = live.last_map[1]
            else:
                parent_map = ps.load_map(parent.page_map_key or "")
        state_path = Path(h.data["sock_dir"]) / f"{ck_id}.state"
        with live.lock, live.agent.quiesce():
            t1 = time.perf_counter()
            try:
                live.qmp.execute("stop")
            except (QMPError, OSError) as exc:
                raise SandboxNotRunning(f"sandbox {h.sandbox_id}: {exc}") from exc
            try:
                t2 = time.perf_counter()
                live.qmp.execute("xen-save-devices-state", filename=str(state_path), live=False)
                sealed = self._seal_disk(live) if live.disk is not None else None
                t3 = time.perf_counter()
                hashes = file_page_hashes(live.mem_fd, live.pages)
                t4 = time.perf_counter()
                new_map, ls = ps.save_layer(live.pages, hashes, parent_map, f"{prefix}/pagemap")
            except Exception as exc:
                raise CheckpointError(f"checkpoint of {h.sandbox_id} failed: {exc}") from exc
            finally:
                with contextlib.suppress(Exception):
                    live.qmp.execute("cont")
            t5 = time.perf_counter()
        state = state_path.read_bytes()
        state_path.unlink(missing_ok=True)
        store.put(f"{prefix}/devstate", state)
        disk_info, disk_bytes = None, 0
        if sealed is not None and live.disk is not None:
            sha, disk_bytes = self._store_layer(store, sealed)
            live.disk.layers.append(sha)
            disk_info = {
                "base": str(live.disk.base),
                "base_id": self._file_id(live.disk.base),
                "layers": list(live.disk.layers),
            }
            stats["disk_ms"] = (time.perf_counter() - t5) * 1000
            h.data["disk"] = str(live.disk.active)
        t6 = time.perf_counter()
        live.last_map = (ck_id, new_map)
        stats.update(
            pause_ms=(t2 - t1) * 1000,
            device_state_ms=(t3 - t2) * 1000,
            hash_ms=(t4 - t3) * 1000,
            key_ms=ls.key_ms,
            store_ms=ls.store_ms,
            downtime_ms=(t5 - t1) * 1000,
            total_ms=(t6 - t0) * 1000,
        )
        return CheckpointManifest(
            id=ck_id,
            parent_id=parent.id if parent else None,
            sandbox_id=h.sandbox_id,
            runtime=self.name,
            spec=h.spec,
            memory_bytes=h.spec.memory_mb << 20,
            page_size=PAGE_SIZE,
            total_pages=ls.total_pages,
            nonzero_pages=ls.nonzero_pages,
            changed_pages=ls.changed_pages,
            new_pages=ls.new_pages,
            stored_bytes=ls.stored_bytes + len(state) + disk_bytes,
            device_state_key=f"{prefix}/devstate",
            page_map_key=f"{prefix}/pagemap",
            runtime_data={
                "accel": h.data["accel"],
                "image_initrd": h.data.get("image_initrd"),
                **({"disk": disk_info} if disk_info else {}),
            },
            stats=stats,
        )

    def restore(self, sandbox_id: str, chain: list[CheckpointManifest], store,
                workdir: Path) -> VMHandle:  # fmt: skip
        if not chain:
            raise CheckpointError("restore needs at least one checkpoint")
        for older, newer in zip(chain, chain[1:], strict=False):
            if newer.parent_id != older.id:
                raise CheckpointError(f"broken chain: {newer.id} is not a child of {older.id}")
        ck = chain[-1]
        if ck.runtime != self.name:
            raise CheckpointError(f"checkpoint {ck.id} was made by runtime {ck.runtime!r}")
        self._require()
        t0 = time.perf_counter()
        ps = self._pagestore(store)
        try:
            page_map = ps.load_map(ck.page_map_key or "")
            state = store.get(ck.device_state_key or "")
        except KeyError as exc:
            raise CheckpointError(f"checkpoint {ck.id} is incomplete in the store: {exc}") from exc
        image = get_image(ck.spec.image)
        accel = ck.runtime_data.get("accel", self.accel)
        workdir.mkdir(parents=True, exist_ok=True)
        disk = None
        if ck.runtime_data.get("disk"):
            disk = self._materialize_disk(ck.runtime_data["disk"], store, workdir)
        t1 = time.perf_counter()
        try:
            vm = self._take_vm(image, ck.spec, accel, disk.active if disk else None)
        except Exception:
            if disk:
                self._remove_disk(disk)
            raise
        t2 = time.perf_counter()
        try:
            fd = os.open(vm.mem_path, os.O_RDWR)
            mm = mmap.mmap(fd, ck.memory_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            pages = np.frombuffer(mm, dtype=np.uint8).reshape(-1, PAGE_SIZE)
            ps.materialize(page_map, pages)
            t3 = time.perf_counter()
            state_path = vm.sock_dir / "restore.state"
            state_path.write_bytes(state)
            self._load_device_state(vm.qmp, state_path)
            agent_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            agent_sock.connect(str(vm.sock_dir / "agent.sock"))
            vm.qmp.execute("cont")
            t4 = time.perf_counter()
            agent = AgentClient(agent_sock)
            agent.sync(timeout_s=30, retry_s=0.05)
            t5 = time.perf_counter()
        except Exception as exc:
            self._kill_vm(vm.proc, vm.qmp, vm.mem_path)
            if disk:
                self._remove_disk(disk)
            err = (vm.sock_dir / "qemu.err").read_text(errors="replace").strip()[-1000:]
            shutil.rmtree(vm.sock_dir, ignore_errors=True)
            raise CheckpointError(
                f"restore of checkpoint {ck.id} failed: {exc}" + (f"; QEMU: {err}" if err else "")
            ) from exc
        state_path.unlink(missing_ok=True)
        live = _Live(proc=vm.proc, qmp=vm.qmp, agent=agent, mem_fd=fd, mem_map=mm, pages=pages)
        live.last_map = (ck.id, page_map)
        live.disk = disk
        live.pid = vm.proc.pid
        h = self._handle(sandbox_id, ck.spec, workdir, vm, accel, restored_from=ck.id)
        h.data["restore_stats"] = {
            "load_ms": (t1 - t0) * 1000,
            "vmm_ms": (t2 - t1) * 1000,
            "memory_ms": (t3 - t2) * 1000,
            "device_state_ms": (t4 - t3) * 1000,
            "agent_ms": (t5 - t4) * 1000,
            "total_ms": (t5 - t0) * 1000,
        }
        self._install(sandbox_id, live)
        return h

    @staticmethod
    def _load_device_state(qmp: QMPClient, path: Path, timeout_s: float = 30.0) -> None:
        """Feed a device-state stream to a QEMU waiting with ``-incoming defer``.

        ``xen-load-devices-state`` would be the mirror of the save, but QEMU 7.2 asserts in
        it when no incoming migration was set up; an incoming migration whose stream holds
        only device sections does the same job."""
        qmp.execute("migrate-incoming", uri=f"exec:cat {shlex.quote(str(path))}")
        deadline = time.monotonic() + timeout_s
        while True:
            status = (qmp.execute("query-migrate") or {}).get("status")
            if status == "completed":
                return
            if status == "failed":
                raise CheckpointError("QEMU refused the device state")
            if time.monotonic() > deadline:
                raise CheckpointError(f"device state not loaded after {timeout_s} s ({status})")
            time.sleep(0.001)

    # ------------------------------------------------------------------ guest operations

    def exec(self, h: VMHandle, req: ExecRequest) -> ExecResult:
        return self._live_of(h).agent.exec(req)

    def exec_stream(self, h: VMHandle, req: ExecRequest) -> Iterator[ExecEvent]:
        return self._live_of(h).agent.exec_stream(req)

    def kill_process(self, h: VMHandle, pid: int, signal: int = 15) -> None:
        self._live_of(h).agent.kill_process(pid, signal)

    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        return self._live_of(h).agent.read_file(path, limit)

    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        return self._live_of(h).agent.write_file(path, data, mode)

    def write_file_stream(
        self, h: VMHandle, path: str, chunks: Iterable[bytes], mode: int = 0o644
    ) -> FileInfo:
        return self._live_of(h).agent.write_file_stream(path, chunks, mode)

    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        return self._live_of(h).agent.list_dir(path)

    def stat(self, h: VMHandle, path: str) -> FileInfo:
        return self._live_of(h).agent.stat(path)

    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        self._live_of(h).agent.remove(path, recursive)

    def expose_port(self, h: VMHandle, port: int) -> str:
        """A user-net ``hostfwd`` added to the running QEMU (HMP ``hostfwd_add``): host
        ``127.0.0.1:<free port>`` -> the guest's ``10.0.2.15:port``. Needs the sandbox's NIC,
        i.e. network mode ``allowlist`` (an empty ``allow`` reaches nothing outward)."""
        if h.spec.network.mode != "allowlist":
            raise UnsupportedOperation(
                f"sandbox {h.sandbox_id} has no network device (network mode 'none'); create it "
                'with network {"mode": "allowlist", "allow": []} to expose guest ports'
            )
        live = self._live_of(h)
        with live.lock:
            if port in live.ports:
                return live.ports[port]
            last = ""
            for _ in range(8):  # a free port can be taken between probing and binding it
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", 0))
                    host_port = probe.getsockname()[1]
                rule = f"hostfwd_add net0 tcp:127.0.0.1:{host_port}-:{port}"
                try:
                    last = live.qmp.execute("human-monitor-command", **{"command-line": rule})
                except (QMPError, OSError) as exc:
                    raise SandboxNotRunning(f"sandbox {h.sandbox_id}: {exc}") from exc
                if not (last or "").strip():
                    live.ports[port] = f"127.0.0.1:{host_port}"
                    return live.ports[port]
            raise GuestAgentError(f"QEMU could not forward port {port}: {last.strip()}")


def make_runtime(settings: Any = None) -> MicroVMRuntime:
    """Factory used by the sandbox service (``lifecycle/runtimes.py``)."""
    root = None
    if settings is not None and getattr(settings, "data_dir", None):
        root = Path(settings.data_dir) / "sandbox" / "microvm"
    section = (settings or get_settings()).sandbox
    return MicroVMRuntime(
        root=root, accel=section.accel, pool_size=section.warm_pool,
        pids_max=section.guest_pids_max,
    )  # fmt: skip


__all__ = ["MicroVMRuntime", "make_runtime"]
