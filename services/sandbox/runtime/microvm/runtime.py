"""The ``microvm`` runtime: QEMU ``-M microvm`` sandboxes with incremental memory checkpoints.

This module is the :class:`~services.sandbox.runtime.base.Runtime` facade: sandbox lifecycle,
checkpoint and restore. Its parts: ``launch`` (QEMU processes, command line, warm pool),
``memory`` (guest RAM: shared files, copy-on-write bases, reading a VM's memory), ``disks``
(qcow2 overlays and their layers), ``qmp`` (the QMP client).

How a sandbox is laid out on the host:

* **Guest RAM**: a booted VM's RAM is a sparse file in ``/dev/shm/k3stack/<instance>`` shared with this
  process; a restored VM's RAM is a private copy-on-write mapping of its checkpoint's base
  file, shared page for page with every other VM restored from the same checkpoint
  (``memory.py``).
* **Files** live in the guest's initramfs root (a tmpfs, i.e. guest RAM), so a memory
  checkpoint captures files and processes together (busybox image: no disk).
* **Disks** (Debian image): a read-only qcow2 base and a private overlay per sandbox, sealed
  into content-addressed layers at each checkpoint (``disks.py``).
* **Device state** (CPU registers, virtio queues, timers) is saved with QMP
  ``xen-save-devices-state`` (device sections only, no RAM: ~1 ms) and loaded into a QEMU
  started with ``-incoming defer``. Despite the name these commands are generic QEMU savevm
  code, not Xen-specific.
* The **guest agent** (``guest/agent.c``) answers on a virtio-serial port whose host end is a
  unix socket of QEMU; :class:`~services.sandbox.guest.protocol.AgentClient` speaks to it.

Checkpoint (VM keeps running afterwards): hold the agent gate -> ``stop`` -> save device state ->
page hashes of guest memory (a booted VM: every data page of its file, natively, holes skipped; a
restored VM: only the pages it wrote since the restore) -> compare with the parent's page hashes ->
store changed non-zero pages content-addressed (:class:`~services.sandbox.pagestore.PageStore`) ->
``cont``. Restore: the checkpoint's base file (assembled from the page store the first time the
checkpoint is restored), a QEMU from the warm pool (or fresh) mapping it privately with
``-incoming defer``, load the device state, ``cont``, resynchronise the agent.

Jail (``jail.py``): each QEMU runs under seccomp, as an unprivileged uid, chrooted into a folder
of its own (device-state files are written there; a disk VM's jail is its disk folder) and in a
cgroup of its own; its command line carries ``-name k3stack-<instance>``, by which a restarted
service reaps the QEMUs it did not re-attach (:meth:`MicroVMRuntime.reap_orphans`).

Acceleration: KVM when a boot probe on this host shows it works (``/dev/kvm`` on these machines
is a nested PVM that fails on stock guest kernels), else TCG; the probe result is cached per
QEMU/kernel/host-kernel version (``accel.json`` in the sandbox cache). Override with
``K3STACK_SANDBOX__ACCEL=tcg|kvm``.
"""

from __future__ import annotations

import contextlib
import logging
import os
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

import tenacity

from services.sandbox.guest.protocol import AgentClient
from services.sandbox.images.builder import Image, get_image, sandbox_cache_dir
from services.sandbox.pagestore import PAGE_SIZE, PageMap, PageStore, PageStores
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
from services.sandbox.runtime.microvm import disks
from services.sandbox.runtime.microvm import jail as jails
from services.sandbox.runtime.microvm.accel import Accelerator
from services.sandbox.runtime.microvm.disks import SETUP_HINT, Disk
from services.sandbox.runtime.microvm.launch import (
    BOOT_TIMEOUT_S,
    QEMU,
    Vm,
    WarmPool,
    boot_budget,
    connect_agent,
    discard,
    guest_addresses,
    kill_vm,
    launch,
    load_device_state,
)
from services.sandbox.runtime.microvm.memory import (
    BaseFiles,
    PrivateMemory,
    SharedMemory,
    can_read_children,
    instance_key,
    shm_dir,
    sweep_stale,
)
from services.sandbox.runtime.microvm.qmp import QMPClient, QMPError
from shared.settings import get_settings

log = logging.getLogger(__name__)


@dataclass
class _Live:
    """Per-sandbox state of this process (not persisted): connections and caches."""

    proc: subprocess.Popen | None
    qmp: QMPClient
    agent: AgentClient
    memory: SharedMemory | PrivateMemory
    last_map: tuple[str, PageMap] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    disk: Disk | None = None
    ports: dict[int, str] = field(default_factory=dict)
    pid: int | None = None
    cgroups: list[Path] = field(default_factory=list)


def missing_runtime_files() -> list[str]:
    """Sources compiled or copied at run time that this install lacks (the probe names them)."""
    from services.sandbox.images.builder import GUEST_DIR
    from services.sandbox.pagestore.hashing import _SRC as PAGEHASH_SRC

    needed = (GUEST_DIR / "agent.c", GUEST_DIR / "init.sh", PAGEHASH_SRC)
    return [str(p) for p in needed if not p.is_file()]


class MicroVMRuntime(Runtime):
    """QEMU microvm sandboxes (see module docstring)."""

    name = "microvm"
    capabilities = RuntimeCapabilities(memory_checkpoint=True, fork=True, network_allowlist=True)
    guest_addresses = staticmethod(guest_addresses)

    def __init__(
        self,
        root: Path | None = None,
        accel: str | None = None,
        pool_size: int = 0,
        pids_max: int = 1024,
        cow_restore: bool = True,
        boot_timeout_s: float = BOOT_TIMEOUT_S,
        qemu_user: str = "k3stack-vm",
    ) -> None:
        """``accel``: ``kvm``, ``tcg``, or None/``auto`` (a boot probe decides); ``pids_max``:
        processes the guest's commands may have at once (the agent's cgroup limit);
        ``cow_restore``: restores map the checkpoint's base file copy-on-write (False: copy
        the checkpoint's pages into a new shared file per restore, the older way; also what
        happens where this process may not read its QEMUs' memory, see ``memory.py``);
        ``qemu_user``: the user QEMU drops to when the service is root (``jail.py``)."""
        self.root = Path(root) if root else sandbox_cache_dir() / "vms"
        self.pids_max = pids_max
        self.boot_timeout_s = boot_timeout_s  # an idle host's boot wait (see boot_budget)
        self.cow_restore = cow_restore and can_read_children()
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self._pagestores = PageStores()
        self._images: dict[str, Image] = {}
        self.shm = shm_dir(instance_key(self.root))  # this instance's own /dev/shm folder
        self.jail = jails.Jail(instance_key(self.root), jails.resolve_user(qemu_user))
        self._accel = Accelerator(accel, self.shm, pids_max, self.jail)
        sweep_stale(self.shm)  # a crashed predecessor's unmapped files; never another's
        self.bases = BaseFiles(self.shm / "base")
        self.pool = WarmPool(pool_size, self._start_incoming)

    @property
    def pool_size(self) -> int:
        return self.pool.size

    @pool_size.setter
    def pool_size(self, n: int) -> None:
        self.pool.size = n

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
        return True, f"{qemu}, kernel {k.version}, accel {self._accel.describe()}"

    def _require(self) -> None:
        ok, why = self.available()
        if not ok:
            raise RuntimeUnavailable(f"microvm runtime unavailable: {why}")

    @property
    def accel(self) -> str:
        return self._accel.value

    def _image(self, name: str) -> Image:
        """``get_image`` once per image (it hashes its inputs, ~40 ms: on every restore's
        critical path otherwise); looked up again if its initramfs went away."""
        image = self._images.get(name)
        if image is None or not image.initrd.exists():
            image = self._images[name] = get_image(name)
        return image

    # ------------------------------------------------------------------ QEMU processes

    def _start_incoming(self, image: Image, spec: SandboxSpec, accel: str, base: str | None,
                        disk: Path | None = None) -> Vm:  # fmt: skip
        """A QEMU waiting for a restore (``base``: the checkpoint whose base file it maps)."""
        return launch(image, spec, accel, incoming=True, disk=disk, base=base, shm=self.shm,
                      link_base=self.bases.link, pids_max=self.pids_max,
                      jail=self.jail)  # fmt: skip

    def _take_vm(self, image: Image, spec: SandboxSpec, accel: str, disk: Path | None,
                 base: str | None) -> tuple[Vm, bool]:  # fmt: skip
        """A QEMU waiting for this restore, and whether it came from the warm pool."""
        if disk is not None:  # a disk is per sandbox: a pooled QEMU cannot have it yet
            return self._start_incoming(image, spec, accel, base, disk), False
        vm = self.pool.take(image, spec, accel, base)
        return (vm, True) if vm else (self._start_incoming(image, spec, accel, base), False)

    def _take_template_vm(self, image: Image, ck: CheckpointManifest, accel: str,
                          disk: Any, store) -> tuple[Vm | None, bool]:  # fmt: skip
        """For a checkpoint whose base file does not exist yet and for which no QEMU waits: a
        template QEMU from the warm pool (the restore copies the pages into its own file,
        which costs what assembling the base would, minus the QEMU start), and the base is
        assembled and pooled in the background for the next restore. Else ``(None, False)``."""
        if disk is not None or not self.cow_restore or not self.pool.size:
            return None, False
        if self.bases.path(ck.id).exists() or self.pool.count(image, ck.spec, accel, ck.id):
            return None, False
        vm = self.pool.take(image, ck.spec, accel, None)
        if vm is None:  # this template is not pooled yet: it will be for the next restore
            self._in_background(self.pool.fill, image, ck.spec, accel, None)
            return None, False
        self._in_background(self.prewarm, checkpoint=ck, store=store)
        return vm, True

    @staticmethod
    def _in_background(fn, *args: Any, **kwargs: Any) -> None:  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - a pool refill is an optimisation only
                log.exception("warm pool refill failed")

        threading.Thread(target=run, name="k3stack-prewarm", daemon=True).start()

    def prewarm(self, spec: SandboxSpec | None = None, checkpoint: CheckpointManifest | None = None,
                store=None) -> None:  # fmt: skip
        """Fill the warm pool now: QEMUs waiting for restores of ``checkpoint`` (its base file
        assembled if need be), or without it for copying restores (``cow_restore=False``)."""
        spec = checkpoint.spec if checkpoint is not None else spec or SandboxSpec()
        image = self._image(spec.image)
        if image.disk is not None:
            return
        base = None
        if checkpoint is not None and self.cow_restore:
            ps = self._pagestore(store)
            page_map = ps.load_map(checkpoint.page_map_key or "")
            self.bases.ensure(checkpoint.id, page_map, ps, checkpoint.memory_bytes)
            base = checkpoint.id
        self.pool.fill(image, spec, self.accel, base)

    def close(self) -> None:
        self.pool.close()
        self.bases.close()
        jails.remove_instance_cgroups(self.jail.instance)
        for d in (self.shm / "base", self.shm):  # the instance's folder, once nothing is in it
            with contextlib.suppress(OSError):
                d.rmdir()

    # ------------------------------------------------------------------ lifecycle

    def _handle(self, sandbox_id: str, spec: SandboxSpec, workdir: Path, vm: Vm,
                accel: str, restored_from: str | None = None,
                base_map_key: str | None = None) -> VMHandle:  # fmt: skip
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
                "jail": str(vm.jail or vm.sock_dir),
                "cgroups": [str(cg) for cg in vm.cgroups],
                **({"disk": str(vm.disk)} if vm.disk else {}),
                **({"mem_base": vm.base, "mem_base_map": base_map_key} if vm.base else {}),
                **({"network": guest_addresses(spec)} if spec.network.mode == "allowlist" else {}),
            },
        )

    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        self._require()
        image = self._image(spec.image)
        accel = self.accel
        workdir.mkdir(parents=True, exist_ok=True)
        tries = []
        for _ in range(2):  # a boot that missed its budget gets one more try, on a fresh disk
            disk = disks.new_overlay(workdir, image.disk) if image.disk else None
            budget, load = boot_budget(self.boot_timeout_s)
            vm = launch(image, spec, accel, incoming=False, disk=disk.active if disk else None,
                        shm=self.shm, pids_max=self.pids_max, jail=self.jail)  # fmt: skip
            try:
                agent = connect_agent(vm.sock_dir / "agent.sock", budget)
                break
            except Exception:  # noqa: BLE001 - told below, with the console's last lines
                console = (vm.sock_dir / "console.log").read_text(errors="replace")[-1500:]
                kill_vm(vm.proc, vm.qmp, vm.mem_path, vm.cgroups)
                if disk:
                    disks.remove_disk(disk)
                tries.append(f"{budget:.0f} s at load {load:.1f} per core")
                log.warning("sandbox %s: guest did not boot within %s", sandbox_id, tries[-1])
        else:
            raise GuestAgentError(
                f"guest did not boot, twice ({'; '.join(tries)}; the budget is "
                f"K3STACK_SANDBOX__BOOT_TIMEOUT_S={self.boot_timeout_s:g} scaled by the load); "
                f"console tail:\n{console}"
            )
        h = self._handle(sandbox_id, spec, workdir, vm, accel)
        live = _Live(proc=vm.proc, qmp=vm.qmp, agent=agent, memory=SharedMemory(vm.mem_path))
        live.pid, live.cgroups = vm.proc.pid, vm.cgroups
        live.disk = disk
        self._install(sandbox_id, live)
        if spec.network.mode == "allowlist":
            self._write_hosts(h)
        return h

    def _write_hosts(self, h: VMHandle) -> None:
        lines = ["127.0.0.1 localhost sandbox"]
        for dest, guest in guest_addresses(h.spec).items():
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
            self._release(old)

    def _release(self, live: _Live) -> None:
        """End a live entry's QEMU (if still running) and free its mapping and fd."""
        live.agent.close()
        kill_vm(live.proc, live.qmp, None)
        if live.proc is None and live.pid:  # adopted: not our child, signal it by pid
            with contextlib.suppress(OSError):
                if Path(f"/proc/{live.pid}/cmdline").read_bytes().startswith(QEMU.encode()):
                    os.kill(live.pid, signal.SIGKILL)
        jails.remove_cgroups(live.cgroups)
        live.last_map = None
        live.memory.close()

    def adopt(self, h: VMHandle) -> bool:
        """Re-attach to a QEMU a previous service process started: its QMP and agent sockets
        accept a new client once the old one is gone, and the memory file is still there.
        Sandboxes with a disk are not adopted (their overlay chain is not in the handle):
        the manager recovers them from their last checkpoint instead; nor are restored VMs
        whose memory this process may not read (no ptrace rights over a QEMU it did not start)."""
        if h.data.get("disk") or not self.is_alive(h):
            return False
        sock_dir = Path(h.data.get("sock_dir", ""))
        mem_path = Path(h.data.get("mem_path", ""))
        if not sock_dir.is_dir() or not mem_path.is_file():
            return False
        qmp = None
        try:
            memory: SharedMemory | PrivateMemory
            if h.data.get("mem_base"):
                memory = PrivateMemory(h.pid or 0, mem_path, h.spec.memory_mb << 20,
                                       h.data["mem_base_map"])  # fmt: skip
                memory.check_access()
            else:
                memory = SharedMemory(mem_path)
            qmp = QMPClient(str(sock_dir / "qmp.sock"), timeout_s=10)
            status = (qmp.execute("query-status") or {}).get("status")
            if status == "paused":  # the service died mid-checkpoint, with the vCPUs stopped
                qmp.execute("cont")
            agent = connect_agent(sock_dir / "agent.sock", timeout_s=30)
        except Exception as exc:  # noqa: BLE001 - any failure means "recover instead"
            log.warning("adopting sandbox %s failed: %s", h.sandbox_id, exc)
            if qmp is not None:
                with contextlib.suppress(Exception):
                    qmp.close()
            return False
        live = _Live(proc=None, qmp=qmp, agent=agent, memory=memory)
        live.pid, live.cgroups = h.pid, [Path(cg) for cg in h.data.get("cgroups", [])]
        self._install(h.sandbox_id, live)
        return True

    def reap_orphans(self, keep: list[VMHandle], checkpoints: set[str]) -> dict[str, int]:
        """End this instance's QEMUs (tagged ``-name k3stack-<instance>``) nobody re-attached:
        warm-pool ones waiting with ``-incoming defer``, VMs of lost sandboxes; then their
        cgroups, socket folders and the memory files no process maps any more."""
        killed = jails.reap(self.jail.instance, {h.pid for h in keep if h.pid})
        return {"qemu": len(killed), "shm_files": sweep_stale(self.shm)}

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

    def broken_reason(self, h: VMHandle) -> str | None:
        live = self._live.get(h.sandbox_id)  # one dict read: atomic
        return live.agent.broken if live else None

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
            self._release(live)
        elif h.pid and self.is_alive(h):  # left over from a previous service process
            with contextlib.suppress(OSError):
                os.kill(h.pid, signal.SIGKILL)
        if live is None:
            jails.remove_cgroups([Path(cg) for cg in h.data.get("cgroups", [])])
        if mem_path is not None:  # its own file, or its link to a base (the base stays)
            mem_path.unlink(missing_ok=True)
        if live is not None and live.disk is not None:
            disks.remove_disk(live.disk)
        elif h.data.get("disk"):  # a previous service process's sandbox
            shutil.rmtree(Path(h.data["disk"]).parent, ignore_errors=True)
        if h.data.get("sock_dir"):
            shutil.rmtree(h.data["sock_dir"], ignore_errors=True)

    def destroy(self, h: VMHandle) -> None:
        self.stop(h)
        shutil.rmtree(h.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ garbage collection

    def _pagestore(self, store) -> PageStore:
        return self._pagestores.of(store)

    object_prefixes = ("checkpoints/", "pagestore/packs/", "disks/")

    def referenced_keys(self, m: CheckpointManifest, store) -> set[str]:
        keys = super().referenced_keys(m, store)
        keys.update(self._pagestores.referenced(store, m.page_map_key))
        for sha in (m.runtime_data.get("disk") or {}).get("layers", []):
            keys.add(f"disks/{sha}")
        return keys

    def forget_objects(self, keys: set[str]) -> None:
        self._pagestores.forget(keys)

    def collect_local(self, referenced: set[str], grace_s: float) -> tuple[int, int]:
        """Drop cached disk layers no reachable checkpoint names, and memory base files no VM
        maps that nobody restored from for ``grace_s`` (a later restore assembles them again)."""
        files, freed = disks.collect_layers(self.root, referenced, grace_s)
        bfiles, bfreed = self.bases.collect(grace_s)
        return files + bfiles, freed + bfreed

    # ------------------------------------------------------------------ checkpoints

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
        jail_dir = Path(h.data.get("jail") or h.data["sock_dir"])  # QEMU writes only there
        state_path = jail_dir / f"{ck_id}.state"
        sealed = None
        with live.lock, live.agent.quiesce():
            t1 = time.perf_counter()
            try:
                live.qmp.execute("stop")
            except (QMPError, OSError) as exc:
                raise SandboxNotRunning(f"sandbox {h.sandbox_id}: {exc}") from exc
            try:
                t2 = time.perf_counter()
                live.qmp.execute("xen-save-devices-state", live=False,
                                 filename=self._qemu_path(h, jail_dir, state_path))  # fmt: skip
                if live.disk is not None:
                    sealed = disks.seal_disk(live.disk, live.qmp, self.jail)
                t3 = time.perf_counter()
                pages, hashes = live.memory.capture(ps, parent_map)
                t4 = time.perf_counter()
                new_map, ls = ps.save_layer(pages, hashes, parent_map, f"{prefix}/pagemap")
            except Exception as exc:
                raise CheckpointError(f"checkpoint of {h.sandbox_id} failed: {exc}") from exc
            finally:
                with contextlib.suppress(Exception):
                    live.qmp.execute("cont")
            t5 = time.perf_counter()
        del pages
        state = state_path.read_bytes()
        state_path.unlink(missing_ok=True)
        store.put(f"{prefix}/devstate", state)
        disk_info, disk_bytes = None, 0
        if sealed is not None and live.disk is not None:
            sha, disk_bytes = disks.store_layer(store, sealed)
            live.disk.layers.append(sha)
            disk_info = disks.disk_info(live.disk)
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
        if isinstance(live.memory, PrivateMemory):
            stats.update(live.memory.last_stats)
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

    def _qemu_path(self, h: VMHandle, jail_dir: Path, path: Path) -> str:
        """``path`` as the sandbox's QEMU sees it (relative to its chroot, if it has one)."""
        return self.jail.inside(jail_dir, path) if h.data.get("jail") else str(path)

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
        image = self._image(ck.spec.image)
        accel = ck.runtime_data.get("accel", self.accel)
        workdir.mkdir(parents=True, exist_ok=True)
        disk = None
        if ck.runtime_data.get("disk"):
            disk = disks.materialize_disk(ck.runtime_data["disk"], store, workdir, self.root)
        t1 = time.perf_counter()
        base, assembled = (ck.id if self.cow_restore else None), False
        vm, pooled = self._take_template_vm(image, ck, accel, disk, store)
        if vm is not None:  # a fresh checkpoint: its pages are copied into a prewarmed QEMU
            base = None
        t2 = time.perf_counter()
        tries = tenacity.Retrying(  # three: another process may evict the base meanwhile
            stop=tenacity.stop_after_attempt(3),
            retry=tenacity.retry_if_exception_type(FileNotFoundError),
            reraise=True,
        )
        try:
            for attempt in tries if vm is None else ():
                with attempt:
                    if base is not None:
                        assembled = self.bases.ensure(ck.id, page_map, ps, ck.memory_bytes)
                    t2 = time.perf_counter()
                    vm, pooled = self._take_vm(image, ck.spec, accel,
                                               disk.active if disk else None, base)  # fmt: skip
        except Exception:
            if disk:
                disks.remove_disk(disk)
            raise
        t3 = time.perf_counter()
        memory: SharedMemory | PrivateMemory | None = None
        try:
            if base is None:  # copying restore: the checkpoint's pages into the VM's own file
                memory = SharedMemory(vm.mem_path)
                assert memory.pages is not None
                ps.materialize(page_map, memory.pages)
            else:
                memory = PrivateMemory(vm.proc.pid, vm.mem_path, ck.memory_bytes,
                                       ck.page_map_key or "")  # fmt: skip
                memory.check_access()  # its checkpoints must be able to read it
            t4 = time.perf_counter()
            agent, guest_stats = self._resume_guest(vm, state)
            t5 = time.perf_counter()
        except Exception as exc:
            if memory is not None:
                memory.close()
            err = (vm.sock_dir / "qemu.err").read_text(errors="replace").strip()[-1000:]
            discard(vm)
            if disk:
                disks.remove_disk(disk)
            raise CheckpointError(
                f"restore of checkpoint {ck.id} failed: {exc}" + (f"; QEMU: {err}" if err else "")
            ) from exc
        live = _Live(proc=vm.proc, qmp=vm.qmp, agent=agent, memory=memory)
        live.last_map = (ck.id, page_map)
        live.disk = disk
        live.pid, live.cgroups = vm.proc.pid, vm.cgroups
        h = self._handle(sandbox_id, ck.spec, workdir, vm, accel, restored_from=ck.id,
                         base_map_key=ck.page_map_key)  # fmt: skip
        h.data["restore_stats"] = {
            "load_ms": (t1 - t0) * 1000,
            "memory_ms": (t2 - t1) * 1000 + (t4 - t3) * 1000,
            "base_assembled": assembled,
            "vmm_ms": (t3 - t2) * 1000,
            "pooled": pooled,
            "pool": ("base" if vm.base else "template") if pooled else None,
            "guest_ms": (t5 - t4) * 1000,
            **guest_stats,
            "total_ms": (t5 - t0) * 1000,
        }
        self._install(sandbox_id, live)
        return h

    def _resume_guest(self, vm: Vm, state: bytes) -> tuple[AgentClient, dict[str, float]]:
        """Load the device state into a waiting QEMU, run it, and resynchronise the agent.
        Returns the agent client and timings (with ``hellos``: how many it took; 1 = none
        was missed)."""
        state_path = vm.sock_dir / "restore.state"
        state_path.write_bytes(state)
        try:
            # connected before the device state loads: the port's host side is open, as it
            # was at the checkpoint, from the first instruction the guest runs
            agent_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            agent_sock.connect(str(vm.sock_dir / "agent.sock"))
            t0 = time.perf_counter()
            load_device_state(vm.qmp, state_path)
            t1 = time.perf_counter()
            vm.qmp.execute("cont")
            agent = AgentClient(agent_sock)
            hellos = agent.sync(timeout_s=30, retry_s=1.0)
            t2 = time.perf_counter()
        finally:
            state_path.unlink(missing_ok=True)
        stats = {
            "device_state_ms": (t1 - t0) * 1000,
            "hello_ms": (t2 - t1) * 1000,
            "hellos": hellos,
        }
        return agent, stats

    # ------------------------------------------------------------------ guest operations

    def exec(self, h: VMHandle, req: ExecRequest) -> ExecResult:
        return self._live_of(h).agent.exec(req)

    def exec_stream(self, h: VMHandle, req: ExecRequest) -> Iterator[ExecEvent]:
        return self._live_of(h).agent.exec_stream(req)

    def kill_process(self, h: VMHandle, pid: int, signal: int = 15) -> None:
        self._live_of(h).agent.kill_process(pid, signal)

    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        return self._live_of(h).agent.read_file(path, limit)

    def read_file_stream(self, h: VMHandle, path: str, limit: int | None = None) -> Iterator[bytes]:
        return self._live_of(h).agent.read_file_stream(path, limit or (1 << 62))

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
        pids_max=section.guest_pids_max, boot_timeout_s=section.boot_timeout_s,
        qemu_user=section.qemu_user,
    )  # fmt: skip


__all__ = ["MicroVMRuntime", "make_runtime"]
