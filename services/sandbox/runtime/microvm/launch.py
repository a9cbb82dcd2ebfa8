"""Starting and ending the QEMU processes of microVM sandboxes, and the warm pool.

One QEMU per sandbox: ``-M microvm`` with the image's kernel and initramfs, guest RAM a
``memory-backend-file`` (``share=on`` on a VM's own sparse file for a boot; ``share=off`` on a
link to a checkpoint's base file for a restore, see ``memory.py``), the guest agent on a
virtio-serial port whose host end is a unix socket, QMP on another. A restore starts QEMU
with ``-incoming defer`` (so that QEMU does not write the kernel/initrd ROMs over the restored
RAM at reset) and feeds it the device state later.

The **warm pool** keeps such waiting QEMUs ready for restores, of two kinds. *Per template*
(``base`` None): a QEMU on a fresh shared RAM file, prewarmed at service start; a restore of a
checkpoint whose base file does not exist yet copies the checkpoint's pages into that file,
so the first restore of a fresh checkpoint starts no QEMU and assembles no base. *Per base*:
a restored VM's RAM is its checkpoint's base file, which a QEMU maps when it starts, so after
a restore of checkpoint C the pool refills with QEMUs on C's base (the next restore or fork
child of C copies nothing); restores of other checkpoints replace those. Each kind keeps at
most ``size`` QEMUs per key.

Network: none by default. ``allowlist``: ``-netdev user,restrict=on`` (the guest reaches
nothing through it) plus one ``guestfwd`` per allowed ``host:port``, reachable in the guest at
``10.0.2.(100+i):port`` (and by name through ``/etc/hosts``); see :func:`guest_addresses`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from services.sandbox.guest.protocol import AgentClient
from services.sandbox.images.builder import Image, _static_busybox
from services.sandbox.pagestore import write_sparse_file
from services.sandbox.runtime.base import (
    CheckpointError,
    GuestAgentError,
    RuntimeUnavailable,
    SandboxSpec,
)
from services.sandbox.runtime.microvm.jail import Jail, remove_cgroups, vm_cgroups
from services.sandbox.runtime.microvm.memory import shm_dir
from services.sandbox.runtime.microvm.qmp import QMPClient
from services.sandbox.runtime.sockets import connect_unix
from shared.load import load_per_core, load_scaled

QEMU = "qemu-system-x86_64"
KERNEL_CMDLINE = "console=ttyS0 quiet panic=-1 init_on_free=1 tsc=reliable"
"""``init_on_free=1``: freed guest pages are zeroed, so they cost nothing in checkpoints.
``tsc=reliable`` plus ``tsc_early_khz`` (added per host, :func:`host_tsc_khz`): under TCG the
guest TSC ticks at the host's rate, and on a loaded host the PIT calibration fails and the guest
stalls without a clocksource; telling the kernel the frequency skips the calibration."""

BOOT_TIMEOUT_S = 90.0  # K3STACK_SANDBOX__BOOT_TIMEOUT_S's default: an idle host's budget


def boot_budget(base_s: float = BOOT_TIMEOUT_S) -> tuple[float, float]:
    """``(seconds, load per core)``: the boot wait on this host now. A guest under TCG competes
    with everything else for the cores, so a fixed wait that holds on an idle host fails on a
    busy one; the budget grows with the load per core above 1, to 8x (``shared/load.py``)."""
    return load_scaled(base_s), load_per_core()


def host_tsc_khz() -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/sys/devices/system/cpu/cpu0/tsc_freq_khz").read_text())
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    return None


def short_dir(tag: str) -> Path:
    """A directory with a short path for unix sockets (108-byte limit)."""
    d = Path("/tmp/k3s") / tag
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class Vm:
    """A started QEMU (from the pool or fresh), before it belongs to a sandbox. ``mem_path``
    is its own RAM file (for a restore: its link to ``base``, the checkpoint whose base
    file it maps privately)."""

    proc: subprocess.Popen
    sock_dir: Path
    mem_path: Path
    qmp: QMPClient
    key: tuple
    disk: Path | None = None
    base: str | None = None
    jail: Path | None = None  # QEMU's chroot (see jail.py): device-state files go there
    cgroups: list[Path] = field(default_factory=list)


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


def forwards(spec: SandboxSpec) -> bool:
    """Whether QEMU pipes guest connections out (``guestfwd``: it starts ``nc`` for each)."""
    return spec.network.mode == "allowlist" and bool(spec.network.allow)


def _guestfwds(spec: SandboxSpec, connector: str | None = None) -> list[str]:
    """``connector``: the ``nc`` QEMU runs (in a chroot: the jail's own busybox)."""
    if connector is None:
        nc = shutil.which("nc")
        connector = nc if nc else f"{_static_busybox()} nc"
    fwds = []
    for dest, guest in guest_addresses(spec).items():
        host, port = dest.rsplit(":", 1)
        host = host.strip("[]")
        if any(c in host for c in ", ;|&$`'\"\\"):
            raise ValueError(f"network allow entry {dest!r} has characters not allowed in a host")
        target = spec.network.pinned.get(dest, host)  # the fence's checked address, if pinned
        fwds.append(f",guestfwd=tcp:{guest}-cmd:{connector} {target} {int(port)}")
    return fwds


def kernel_cmdline(image: Image, accel: str, pids_max: int = 1024) -> str:
    cmdline = f"{KERNEL_CMDLINE} k3s.pids_max={pids_max}"
    khz = host_tsc_khz() if accel == "tcg" else None
    if khz:
        cmdline += f" tsc_early_khz={khz}"
    return cmdline + (" " + image.cmdline if image.cmdline else "")


def qemu_cmdline(image: Image, spec: SandboxSpec, accel: str, sock_dir: Path, mem_path: Path,
                 incoming: bool, disk: Path | None = None, share: bool = True,
                 pids_max: int = 1024, jail: Jail | None = None,
                 jail_dir: Path | None = None) -> list[str]:  # fmt: skip
    """QEMU's command line; with ``jail``, jailed in ``jail_dir`` (see jail.py)."""
    mem = spec.memory_mb
    backend = f"memory-backend-file,id=mem,size={mem}M,mem-path={mem_path}"
    args = [
        QEMU,
        "-M", "microvm,x-option-roms=off,rtc=off,isa-serial=on",
        "-accel", accel,
        "-cpu", "host" if accel == "kvm" else "max",
        "-smp", str(spec.cpu),
        "-m", f"{mem}M",
        "-object", backend + (",share=on" if share else ",share=off"),
        "-machine", "memory-backend=mem",
        "-nodefaults", "-no-user-config", "-nographic", "-display", "none", "-no-reboot",
        "-kernel", str(image.kernel.vmlinuz),
        "-initrd", str(image.initrd),
        "-append", kernel_cmdline(image, accel, pids_max),
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
        connector = "/bin/busybox nc" if jail is not None and jail.chrooted else None
        fwds = "".join(_guestfwds(spec, connector))
        args += ["-netdev", "user,id=net0,restrict=on" + fwds]
        args += ["-device", "virtio-net-device,netdev=net0"]
    if incoming:
        # xen-save-devices-state writes no configuration section; do not expect one
        args += ["-incoming", "defer", "-global", "migration.send-configuration=off"]
    if jail is not None:
        assert jail_dir is not None
        args += jail.args(jail_dir, spawn=forwards(spec))
    return args


def vm_key(image: Image, spec: SandboxSpec, accel: str, base: str | None) -> tuple:
    """What a pooled QEMU must match to serve a restore."""
    return (spec.memory_mb, spec.cpu, accel, spec.network.model_dump_json(), image.initrd, base)


def launch(image: Image, spec: SandboxSpec, accel: str, incoming: bool, *,
           boot_timeout: float = 10.0, disk: Path | None = None, base: str | None = None,
           link_base: Callable[[str, Path], None] | None = None,
           pids_max: int = 1024, shm: Path | None = None, jail: Jail | None = None) -> Vm:  # fmt: skip
    """Start QEMU and connect QMP (its memory file in ``shm``, the instance's own folder).
    ``base``: the checkpoint whose base file the VM maps privately (``link_base(base, path)``
    gives the VM its link to it); else a new sparse file shared with this process. ``jail``:
    QEMU runs jailed (jail.py) in its own folder (a disk VM's: its disk folder) and cgroups."""
    tag = uuid.uuid4().hex[:12]
    folder = shm or shm_dir()
    folder.mkdir(parents=True, exist_ok=True)  # removed when its instance closed empty
    mem_path = folder / f"{tag}.mem"
    if base is not None:
        assert link_base is not None
        link_base(base, mem_path)  # FileNotFoundError: the base is gone
    else:
        write_sparse_file(mem_path, spec.memory_mb << 20)  # a fresh VM's shared RAM
    sock_dir = short_dir(tag)
    jail_dir, cgroups = None, []
    if jail is not None:
        jail_dir = disk.parent if disk is not None else sock_dir / "jail"
        jail.prepare(jail_dir, _static_busybox() if forwards(spec) else None)
        if disk is not None:
            jail.give(disk)  # QEMU writes its overlay, and a restore reopens it, as its uid
            if incoming and jail.chrooted:
                jail.mirror(jail_dir, disk)
        cgroups = vm_cgroups(jail.instance, tag, spec.memory_mb, spec.cpu)
    cmd = qemu_cmdline(image, spec, accel, sock_dir, mem_path, incoming, disk,
                       share=base is None, pids_max=pids_max, jail=jail,
                       jail_dir=jail_dir)  # fmt: skip
    if jail is not None:
        cmd = jail.wrap(cmd, cgroups)
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
        remove_cgroups(cgroups)
        raise RuntimeUnavailable(f"QEMU did not start: {exc}: {err}") from exc
    key = vm_key(image, spec, accel, base)
    return Vm(proc=proc, sock_dir=sock_dir, mem_path=mem_path, qmp=qmp, key=key, disk=disk,
              base=base, jail=jail_dir, cgroups=cgroups)  # fmt: skip


def connect_agent(path: Path, timeout_s: float) -> AgentClient:
    deadline = time.monotonic() + timeout_s
    try:
        sock = connect_unix(str(path), timeout_s)
    except OSError:
        raise GuestAgentError(f"agent socket {path} did not appear") from None
    client = AgentClient(sock)
    client.sync(timeout_s=max(1.0, deadline - time.monotonic()), retry_s=0.2)
    return client


def load_device_state(qmp: QMPClient, path: Path, timeout_s: float = 30.0) -> None:
    """Feed a device-state stream to a QEMU waiting with ``-incoming defer``.

    ``xen-load-devices-state`` would be the mirror of the save, but QEMU 7.2 asserts in
    it when no incoming migration was set up; an incoming migration whose stream holds
    only device sections does the same job."""
    fd = os.open(path, os.O_RDONLY)
    try:  # QEMU reads the file itself (no ``exec:cat`` child process to start)
        qmp.send_fd("devstate", fd)
    finally:
        os.close(fd)
    qmp.execute("migrate-incoming", uri="fd:devstate")
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


def kill_vm(proc: subprocess.Popen | None, qmp: QMPClient | None, mem_path: Path | None,
            cgroups: list[Path] | None = None) -> None:  # fmt: skip
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
    remove_cgroups(cgroups or [])


def discard(vm: Vm) -> None:
    """End a QEMU that belongs to no sandbox (pool entry, failed restore)."""
    kill_vm(vm.proc, vm.qmp, vm.mem_path, vm.cgroups)
    shutil.rmtree(vm.sock_dir, ignore_errors=True)


class WarmPool:
    """QEMUs started with ``-incoming defer``, waiting for restores (see module docstring).
    At most ``size`` are kept per template and ``size`` for the latest base; ``start(image,
    spec, accel, base)`` launches one."""

    def __init__(self, size: int, start: Callable[[Image, SandboxSpec, str, str | None], Vm]):
        self.size = size
        self._start = start
        self._vms: list[Vm] = []
        self._lock = threading.Lock()
        self._generation = 0  # close() counts up: a start begun before it is not kept
        self._closed = False  # a fill that begins after close() starts nothing

    def __len__(self) -> int:
        with self._lock:
            return len(self._vms)

    def count(self, image: Image, spec: SandboxSpec, accel: str, base: str | None) -> int:
        """Live QEMUs waiting for this key."""
        key = vm_key(image, spec, accel, base)
        with self._lock:
            return sum(1 for v in self._vms if v.key == key and v.proc.poll() is None)

    def take(self, image: Image, spec: SandboxSpec, accel: str, base: str | None,
             refill: bool = True) -> Vm | None:  # fmt: skip
        """A waiting QEMU for this key, or None; refills in the background either way."""
        key = vm_key(image, spec, accel, base)
        with self._lock:
            for i, vm in enumerate(self._vms):
                if vm.key == key and vm.proc.poll() is None:
                    self._vms.pop(i)
                    break
            else:
                vm = None
        if self.size and refill:
            threading.Thread(target=self.fill, args=(image, spec, accel, base), daemon=True).start()
        return vm

    def fill(self, image: Image, spec: SandboxSpec, accel: str, base: str | None) -> None:
        """Top the pool up with QEMUs for this key; filling for a base ends those kept for
        other bases (template QEMUs stay)."""
        key = vm_key(image, spec, accel, base)
        with self._lock:
            generation = self._generation
            if self._closed:
                return
        while True:
            with self._lock:
                mine = [v for v in self._vms if v.key == key and v.proc.poll() is None]
                if len(mine) >= self.size or generation != self._generation:
                    return
                drop = [v for v in self._vms if v.proc.poll() is not None]
                if base is not None:
                    drop += [v for v in self._vms if v.base not in (None, base)]
                for v in drop:
                    self._vms.remove(v)
            for v in drop:
                discard(v)
            try:
                vm = self._start(image, spec, accel, base)
            except FileNotFoundError:  # the base was collected meanwhile: nothing to keep
                return
            with self._lock:
                keep = generation == self._generation
                if keep:
                    self._vms.append(vm)
            if not keep:  # the pool was closed while this one started
                discard(vm)
                return

    def close(self) -> None:
        with self._lock:
            self._generation += 1
            self._closed = True
            vms, self._vms = self._vms, []
        for vm in vms:
            discard(vm)
