"""The ``process`` runtime: Linux namespaces (bubblewrap) over overlayfs, for hosts without QEMU.

A sandbox is a bubblewrap process tree in its own PID, mount, IPC, UTS and network namespaces
(network mode ``allowlist``: loopback listeners piped to each allowed destination, see
:mod:`~.launch`), whose root is an overlayfs: writes land in an upper
directory under the sandbox's workdir, reads fall through to the image. The image is the host's
``/usr`` (a second overlay, so a sandbox may install into ``/usr/local`` without touching the
host; the host's own ``/usr/local`` is hidden) under a skeleton root with a private copy of ``/etc``, plus any template layers built
on top (:meth:`ProcessRuntime.build_image`). The names ``busybox`` and ``debian`` both select
that host image here: what differs between them is a microVM matter.

What survives what: checkpoints capture the **filesystem only** (the overlay upper directories,
whiteouts and opaque directories included) — ``capabilities.memory_checkpoint`` is ``False`` and
the service says so in its API. Pause is checkpoint + stop, so processes do not survive a pause,
a restore or a fork; files do.

Checkpoints are incremental: a file whose size, mtime, ctime and inode are unchanged since the
last checkpoint taken in the same workdir is not read again, and file contents are stored
content-addressed (``sandbox/blobs/<sha256>``), so a checkpoint stores only files whose content
is new to the store. During the walk every process of the sandbox is stopped (SIGSTOP) so the
layer is consistent, then continued.

Isolation (:mod:`~.confine`, threat model in ``docs/sandbox-threat-model.md``): each sandbox runs
as its own unprivileged host uid (:mod:`~.uids`, from the range above ``guest_uid``) in its own
user namespace (root inside only); the files it owns are stored as ``guest_uid`` and shown to it
as its uid through idmapped mounts (:mod:`~.idmap`), so a sandbox's uid owns nothing of
another's. No capabilities, ``no_new_privs`` and a seccomp filter; ``/proc/sys`` and ``/sys`` are read-only,
and of the host's ``/usr`` only ``usr_dirs`` show. It shares the host's kernel: a development
runtime, weaker than ``docker`` or ``microvm``. Each command runs in its own pids cgroup under
its sandbox's (:mod:`~.cgroups`: a fork bomb cannot starve the next command); cpu/memory limits
are not enforced.
Requires root (overlay mounts), Linux >= 5.19 (overlayfs over idmapped layers), ``bwrap``
(Debian: ``apt-get install bubblewrap``), and util-linux's ``nsenter``, ``setpriv`` and
``unshare``.

The runtime is composed of one mixin per job: images (``images``), namespaces and launch
(``launch``), overlay checkpoints (``checkpoints``), commands (``execs``) and files (``files``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

from services.sandbox.runtime.base import (
    Runtime,
    RuntimeCapabilities,
    RuntimeUnavailable,
    VMHandle,
)
from services.sandbox.runtime.portforward import PortForwarder
from services.sandbox.runtime.process import idmap
from services.sandbox.runtime.process.cgroups import CommandCgroups
from services.sandbox.runtime.process.checkpoints import CheckpointsMixin
from services.sandbox.runtime.process.confine import child_confiner
from services.sandbox.runtime.process.execs import ExecMixin
from services.sandbox.runtime.process.files import FilesMixin
from services.sandbox.runtime.process.fstree import OVERLAYS
from services.sandbox.runtime.process.host import _umount
from services.sandbox.runtime.process.images import ImagesMixin
from services.sandbox.runtime.process.launch import STAGE_ROOT, LaunchMixin
from services.sandbox.runtime.process.owner import GuestOwnerMixin
from services.sandbox.runtime.process.reap import holder_pids, kill_all, mounted_sandboxes
from services.sandbox.runtime.process.uids import UidPool

USR_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "libexec", "include", "share")
"""Folders of the host's ``/usr`` a sandbox sees by default (not ``local``, ``src``, ``games``)."""


class ProcessRuntime(
    LaunchMixin, ImagesMixin, CheckpointsMixin, ExecMixin, GuestOwnerMixin, FilesMixin, Runtime
):
    """bubblewrap + overlayfs sandboxes under ``root`` (images there; sandboxes in workdirs)."""

    name = "process"
    capabilities = RuntimeCapabilities(memory_checkpoint=False, fork=True, network_allowlist=True)

    def __init__(
        self, root: Path, bwrap: str | None = None, pids_max: int = 1024,
        ro_binds: tuple[Path, ...] = (), guest_uid: int = 100000, guest_uids: int = 4096,
        usr_dirs: tuple[str, ...] = USR_DIRS,
    ) -> None:  # fmt: skip
        if guest_uid <= 0:
            raise ValueError("the process runtime's guest uid must not be root")
        self.root = Path(root)
        self.guest_uid = guest_uid
        self._uids = UidPool(self.root / "uids", guest_uid, guest_uids)
        self.usr_dirs = tuple(usr_dirs)
        self._confiner = child_confiner()
        self.ro_binds = tuple(Path(p) for p in ro_binds)
        self._egress: dict[str, list[PortForwarder]] = {}
        self._cgroups = CommandCgroups(pids_max)
        self.images_dir = self.root / "images"
        self.bwrap = bwrap or shutil.which("bwrap")
        self.nsenter = shutil.which("nsenter")
        self.setpriv = shutil.which("setpriv")
        self.unshare = shutil.which("unshare")  # user namespaces of the idmapped mounts
        self._lock = threading.Lock()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._execs: dict[str, set[subprocess.Popen[bytes]]] = {}
        self._gates: dict[str, threading.Lock] = {}
        self._forwards: dict[tuple[str, int], PortForwarder] = {}

    # -- availability and images

    def available(self) -> tuple[bool, str]:
        if not self.bwrap:
            return False, "bwrap not on PATH: apt-get install -y bubblewrap"
        if not self.nsenter or not self.setpriv or not self.unshare:
            return False, "nsenter/setpriv/unshare (util-linux) not on PATH"
        if os.geteuid() != 0:
            return False, "the process runtime mounts overlayfs and needs root"
        limits = self._cgroups.available()[1]
        return (
            True,
            f"bubblewrap ({self.bwrap}) over overlayfs; checkpoints cover files only; {limits}",
        )

    def _require(self) -> None:
        ok, why = self.available()
        if not ok:
            raise RuntimeUnavailable(f"process runtime unavailable: {why}")

    def reap_orphans(self, keep: list[VMHandle], checkpoints: set[str]) -> dict[str, int]:
        """Sandboxes of this instance whose overlays are still mounted but that nobody
        re-attached (a crash mid-create, a ``down`` cut short): holder killed, cgroups,
        stage and overlays removed (see :mod:`~.reap`)."""
        kept = {h.sandbox_id for h in keep}
        orphans = mounted_sandboxes(self.root.parent, STAGE_ROOT) - kept
        for sid in orphans:
            kill_all(holder_pids(STAGE_ROOT / sid))
            self._cgroups.remove_sandbox(sid)
            self._unstage(sid)
            for ov in reversed(OVERLAYS):
                _umount(self.root.parent / "vms" / sid / "mnt" / ov)
            idmap.unbind_all(STAGE_ROOT / ".idmap" / sid)
            self._uids.release(self._uids.held_by(sid), sid)
        return {"sandboxes": len(orphans)}

    def close(self) -> None:
        with self._lock:
            children = list(self._children.values())
        for proc in children:
            proc.poll()
