"""The jail around each microVM's QEMU: what a guest that escapes into QEMU finds there.

* **seccomp**: ``-sandbox on,obsolete=deny,spawn=deny,resourcecontrol=deny`` (spawn is
  allowed only for a VM whose allowlist network pipes connections through ``nc``: slirp's
  ``guestfwd`` starts one per connection). ``elevateprivileges`` stays ``allow`` where QEMU
  drops its uid: QEMU 7.2 installs its filter *before* ``-runas``'s ``setuid``, so ``deny``
  kills it at start; the drop itself closes that door (no capabilities left, and
  ``no_new_privs`` set before exec, so no set-uid program can give them back).
* **uid**: ``-runas <uid>:<gid>`` (the ``qemu_user`` setting; scripts/setup_system.sh makes the
  ``k3stack-vm`` system user) once QEMU has opened everything it needs — kernel, initramfs,
  memory file, disks, sockets, console. Before exec its capability bounding set is cut to the
  three the drop needs (``setuid``, ``setgid``, ``sys_chroot``).
* **chroot**: ``-chroot <jail>`` into a folder of its own that holds only what QEMU writes
  later: device-state files of checkpoints (and, for a disk VM, its overlays: the jail *is* the
  disk folder), plus a static busybox as ``/bin/sh`` where ``guestfwd`` needs one.
* **cgroup** per VM (``k3stack-vm/<instance>/<vm tag>`` under each controller, v2 or v1):
  memory (guest RAM + :data:`MEMORY_OVERHEAD_MB`), cpu (its vCPUs + one for QEMU's own
  threads) and pids (:data:`PIDS_MAX`). QEMU enters it before it runs (a shell writes its own
  pid to ``cgroup.procs`` and execs), so every page and thread it makes is counted.

Where the service is not root, or is root without the capabilities the drop needs (a container
run with ``cap_drop: ALL``, as docker-compose.yml and the chart run the sandbox: the container is
then QEMU's confinement), QEMU keeps the service's uid and only seccomp (with
``elevateprivileges=deny``) and ``no_new_privs`` apply; the service logs which are missing. Command lines carry ``-name
k3stack-<instance>`` so a restarted service finds its own QEMUs, and only those (:func:`reap`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import tenacity

log = logging.getLogger(__name__)

FALLBACK_IDS = (65534, 65534)
"""``nobody``: used when the configured user does not exist on this host."""
MEMORY_OVERHEAD_MB = 512
"""QEMU's own memory beside guest RAM: TCG's code buffer, device state, I/O buffers."""
PIDS_MAX = 256
"""QEMU's threads (vCPUs, I/O worker pool) and guestfwd's ``nc`` children."""
CPU_PERIOD_US = 100_000
_V1 = {"memory": "memory.limit_in_bytes", "pids": "pids.max"}


DROP_CAPS = {"chown": 0, "setgid": 6, "setuid": 7, "sys_chroot": 18}
"""Capabilities (bit numbers) a root service needs to hand QEMU its folder, drop and chroot."""


def missing_caps() -> list[str]:
    """Which of :data:`DROP_CAPS` this process lacks in its effective set."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                eff = int(line.split()[1], 16)
                return [name for name, bit in DROP_CAPS.items() if not eff >> bit & 1]
    return []


def resolve_user(user: str) -> tuple[int, int] | None:
    """``(uid, gid)`` QEMU drops to: None when the service is not root, lacks the capabilities
    of the drop, or ``user`` is empty; ``uid:gid`` as given; a user name looked up (a missing
    one falls back to ``nobody``)."""
    if os.geteuid() != 0 or not user:
        return None
    if missing := missing_caps():
        log.warning("microvm: QEMU keeps the service's uid, no chroot: the service lacks "
                    "CAP_%s (seccomp and no_new_privs still apply)",
                    ", CAP_".join(c.upper() for c in missing))  # fmt: skip
        return None
    uid, sep, gid = user.partition(":")
    if sep and uid.isdigit() and gid.isdigit():
        ids = (int(uid), int(gid))
    else:
        try:
            pw = pwd.getpwnam(user)
            ids = (pw.pw_uid, pw.pw_gid)
        except KeyError:
            log.warning("microvm: user %r does not exist (scripts/setup_system.sh makes it); "
                        "QEMU runs as nobody", user)  # fmt: skip
            ids = FALLBACK_IDS
    if ids[0] == 0:
        raise ValueError("the microvm qemu_user must not be root")
    return ids


def tag_of(instance: str) -> str:
    """The ``-name`` of every QEMU of one service instance (its runtime folder's digest)."""
    return f"k3stack-{instance}"


@dataclass(frozen=True)
class Jail:
    """How one runtime instance jails its QEMUs (see module docstring)."""

    instance: str
    ids: tuple[int, int] | None

    def args(self, folder: Path, spawn: bool) -> list[str]:
        """QEMU arguments: the name tag, seccomp, and (as root) uid drop and chroot."""
        seccomp = "on,obsolete=deny,resourcecontrol=deny"
        seccomp += ",spawn=allow" if spawn else ",spawn=deny"
        args = ["-name", tag_of(self.instance)]
        if self.ids is None:
            return [*args, "-sandbox", seccomp + ",elevateprivileges=deny"]
        return [
            *args,
            "-sandbox",
            seccomp,
            "-runas",
            f"{self.ids[0]}:{self.ids[1]}",
            "-chroot",
            str(folder),
        ]

    @property
    def chrooted(self) -> bool:
        return self.ids is not None

    def prepare(self, folder: Path, busybox: Path | None = None) -> None:
        """Make ``folder`` QEMU's own (it writes device-state files there after the drop);
        with ``busybox``: ``/bin/sh`` and ``/etc`` for guestfwd's ``nc`` in the chroot."""
        folder.mkdir(parents=True, exist_ok=True)
        if busybox is not None and self.chrooted:
            (folder / "bin").mkdir(exist_ok=True)
            (folder / "etc").mkdir(exist_ok=True)
            shutil.copy2(busybox, folder / "bin" / "busybox")
            with contextlib.suppress(FileExistsError):
                (folder / "bin" / "sh").symlink_to("busybox")
            for name in ("resolv.conf", "hosts"):
                with contextlib.suppress(OSError):
                    shutil.copy2(Path("/etc") / name, folder / "etc" / name)
        if self.ids is not None:
            os.chown(folder, *self.ids)

    def give(self, path: Path) -> None:
        """Let QEMU write a file both before the drop (as root without ``CAP_DAC_OVERRIDE``: root
        owns it) and after it (its group may write it): a disk overlay."""
        if self.ids is not None:
            os.chown(path, 0, self.ids[1])
            os.chmod(path, 0o660)

    def mirror(self, folder: Path, path: Path) -> None:
        """Make ``path`` (a file in ``folder``) reachable at its host path from inside the
        chroot too (a hard link): an incoming migration reopens its disk by name when the
        restored VM starts, after the chroot."""
        link = folder / str(path).lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, link)

    def inside(self, folder: Path, path: Path) -> str:
        """``path`` (in ``folder``) as QEMU sees it: relative to its chroot when it has one."""
        return "/" + str(path.relative_to(folder)) if self.chrooted else str(path)

    def wrap(self, cmd: list[str], cgroups: list[Path]) -> list[str]:
        """``cmd`` started by a shell that enters ``cgroups`` first, through ``setpriv``
        (``no_new_privs``; as root: bounding set cut to what ``-runas``/``-chroot`` need)."""
        setpriv = shutil.which("setpriv")
        if setpriv:
            pre = [setpriv, "--no-new-privs"]
            if self.ids is not None:
                pre += ["--bounding-set", "-all,+setuid,+setgid,+sys_chroot"]
            cmd = [*pre, *cmd]
        if not cgroups:
            return cmd
        enter = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 97; shift; done; shift'
        procs = [str(cg / "cgroup.procs") for cg in cgroups]
        return ["/bin/sh", "-c", enter + '; exec "$@"', "sh", *procs, "--", *cmd]


# ---------------------------------------------------------------------- cgroups


def _hierarchies() -> list[tuple[str, Path]]:
    """``(controller or "v2", mount)`` of each writable hierarchy that limits memory, cpu or
    pids: the unified tree when it has all three, else each cgroup v1 controller found."""
    root = Path("/sys/fs/cgroup")
    for v2 in (root, root / "unified"):
        try:
            have = set((v2 / "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if {"memory", "cpu", "pids"} <= have and os.access(v2, os.W_OK):
            return [("v2", v2)]
    out = []
    for ctrl in ("memory", "cpu", "pids"):
        d = root / ctrl
        if (d / "cgroup.procs").exists() and os.access(d, os.W_OK):
            out.append((ctrl, d))
    return out


def _put(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        log.warning("microvm: cgroup limit %s=%s not set: %s", path, value, exc)


def vm_cgroups(instance: str, tag: str, memory_mb: int, cpus: int) -> list[Path]:
    """A cgroup per hierarchy for one VM, limits set; empty where none is writable."""
    mem = str((memory_mb + MEMORY_OVERHEAD_MB) << 20)
    quota = str((cpus + 1) * CPU_PERIOD_US)
    out = []
    for ctrl, mount in _hierarchies():
        cg = mount / "k3stack-vm" / instance / tag
        try:
            if ctrl == "v2":
                for level in (mount, mount / "k3stack-vm", mount / "k3stack-vm" / instance):
                    level.mkdir(exist_ok=True)
                    _put(level / "cgroup.subtree_control", "+memory +cpu +pids")
            cg.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("microvm: no %s cgroup for the VM: %s", ctrl, exc)
            continue
        if ctrl == "v2":
            _put(cg / "memory.max", mem)
            _put(cg / "memory.swap.max", "0")
            _put(cg / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            _put(cg / "pids.max", str(PIDS_MAX))
        elif ctrl == "cpu":
            _put(cg / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _put(cg / "cpu.cfs_quota_us", quota)
        else:
            _put(cg / _V1[ctrl], mem if ctrl == "memory" else str(PIDS_MAX))
        out.append(cg)
    return out


def remove_cgroups(cgroups: list[Path], wait_s: float = 5.0) -> None:
    """Remove a VM's cgroups once its processes are gone (killing what is left): each removal
    tried again every 20 ms while the cgroup is busy, until ``wait_s`` in all is over."""
    deadline = time.monotonic() + wait_s
    for cg in cgroups:
        if cg.exists():
            tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(OSError),
                stop=tenacity.stop_after_delay(max(0.0, deadline - time.monotonic())),
                wait=tenacity.wait_fixed(0.02),
                retry_error_callback=lambda _: None,  # still busy: left as it is
            )(_empty_and_remove, cg)


def _empty_and_remove(cg: Path) -> None:
    with contextlib.suppress(OSError):
        for pid in (cg / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):  # gone already
        cg.rmdir()


def instance_cgroups(instance: str) -> list[Path]:
    """Every VM cgroup of one instance, in every hierarchy."""
    return [
        cg for _, mount in _hierarchies() for cg in (mount / "k3stack-vm" / instance).glob("*")
        if cg.is_dir()
    ]  # fmt: skip


def remove_instance_cgroups(instance: str) -> None:
    """Remove an instance's folder of VM cgroups where no VM is left in it."""
    for _, mount in _hierarchies():
        with contextlib.suppress(OSError):
            (mount / "k3stack-vm" / instance).rmdir()


# ---------------------------------------------------------------------- reaping


def tagged_qemus(instance: str) -> dict[int, list[str]]:
    """Live QEMUs whose command line carries this instance's ``-name`` tag: pid -> argv."""
    want = b"\0-name\0" + tag_of(instance).encode() + b"\0"
    out = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if want in cmdline and b"qemu-system" in cmdline.split(b"\0", 1)[0]:
            out[int(d.name)] = cmdline.decode(errors="replace").split("\0")
    return out


def _sock_dir(argv: list[str]) -> Path | None:
    """The socket folder of a QEMU (its ``-qmp unix:<folder>/qmp.sock,...``)."""
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "-qmp" and value.startswith("unix:"):
            return Path(value[5:].split(",", 1)[0]).parent
    return None


def reap(instance: str, keep: set[int]) -> list[int]:
    """End every QEMU of this instance (a crashed predecessor's: warm-pool ones waiting with
    ``-incoming defer``, VMs nobody re-attached) whose pid is not in ``keep``, and remove their
    cgroups. Returns the pids killed."""
    found = tagged_qemus(instance)
    killed = [pid for pid in found if pid not in keep]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        folder = _sock_dir(found[pid])
        if folder is not None and folder.parent == Path("/tmp/k3s"):
            shutil.rmtree(folder, ignore_errors=True)
    deadline = time.monotonic() + 10
    while killed and time.monotonic() < deadline:
        if not any(_alive(pid) for pid in killed):
            break
        time.sleep(0.02)
    for cg in instance_cgroups(instance):
        with contextlib.suppress(OSError):
            if not {int(p) for p in (cg / "cgroup.procs").read_text().split()} & keep:
                remove_cgroups([cg])
    return killed


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1]
    except (OSError, IndexError):
        return False
    return state != "Z"


__all__ = ["Jail", "reap", "remove_cgroups", "resolve_user", "tag_of", "vm_cgroups"]
