"""Disks of microVM sandboxes (Debian image): qcow2 overlays per sandbox over one read-only
base, sealed into content-addressed layers at each checkpoint.

A checkpoint, with the vCPUs stopped (QEMU has drained and flushed the disk), seals the overlay
with QMP ``blockdev-snapshot-sync`` (the guest writes on into a fresh overlay on top) and
stores the sealed one content-addressed (``disks/<sha256>``): each checkpoint stores only the
disk blocks written since its parent, consistent with the memory captured at the same instant.
Restore/fork fetch the layers once into a shared read-only cache (``<root>/layers``) and give
each new sandbox its own overlay.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from services.sandbox.runtime.base import CheckpointError, RuntimeUnavailable
from services.sandbox.runtime.microvm.jail import Jail
from services.sandbox.runtime.microvm.qmp import QMPClient

SETUP_HINT = "run scripts/setup_sandbox.sh"


@dataclass
class Disk:
    """A sandbox's disk: the active qcow2 overlay and the sealed layers it sits on.

    ``layers`` are content hashes (object store ``disks/<sha>``) from the base upwards; each
    checkpoint seals the active overlay (QEMU switches writes to a fresh one on top) and
    appends it. ``files`` are this sandbox's local qcow2 files, active one last."""

    base: Path
    active: Path
    layers: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def qemu_img(*args: str) -> None:
    res = subprocess.run(["qemu-img", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise CheckpointError(f"qemu-img {args[0]} failed: {res.stderr.strip()[-500:]}")


def new_overlay(workdir: Path, backing: Path, layers: list[str] | None = None) -> Disk:
    """A private qcow2 overlay over ``backing`` in a fresh folder of ``workdir``."""
    if not backing.is_file():
        raise RuntimeUnavailable(f"disk image {backing} is missing: {SETUP_HINT}")
    folder = workdir / f"disk-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    active = folder / "overlay-0.qcow2"
    qemu_img("create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(backing), str(active))
    return Disk(base=backing, active=active, layers=list(layers or []), files=[active])


def file_id(path: Path) -> str:
    """Identity of a read-only base image (size and mtime: a rebuild changes it)."""
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def remove_disk(disk: Disk) -> None:
    shutil.rmtree(disk.active.parent, ignore_errors=True)


def seal_disk(disk: Disk, qmp: QMPClient, jail: Jail) -> Path:
    """Switch the VM's writes to a new overlay on top of the active one (VM stopped: QEMU
    has drained and flushed the disk, so the old overlay now holds exactly the disk as of
    this instant, and is never written again). Returns the sealed file.

    The new overlay is made here and handed to QEMU's uid (``mode=existing``): a jailed QEMU
    can neither reach the sealed file's host path from its chroot nor create files as root."""
    sealed = disk.active
    new = sealed.with_name(f"overlay-{len(disk.files)}.qcow2")
    size = _virtual_size(qmp)
    qemu_img(
        "create", "-q", "-f", "qcow2", "-F", "qcow2", "-u", "-b", str(sealed), str(new), str(size)
    )
    jail.give(new)
    inside = jail.inside(sealed.parent, new)
    qmp.execute("blockdev-snapshot-sync", device="disk0", format="qcow2", mode="existing",
                **{"snapshot-file": inside})  # fmt: skip
    disk.active = new
    disk.files.append(new)
    return sealed


def _virtual_size(qmp: QMPClient) -> int:
    for dev in qmp.execute("query-block") or []:
        if dev.get("device") == "disk0" and dev.get("inserted"):
            return int(dev["inserted"]["image"]["virtual-size"])
    raise CheckpointError("QEMU reports no disk0 to seal")


def store_layer(store, path: Path) -> tuple[str, int]:
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


def disk_info(disk: Disk) -> dict:
    """What a checkpoint records of a disk (its manifest's ``runtime_data["disk"]``)."""
    return {"base": str(disk.base), "base_id": file_id(disk.base), "layers": list(disk.layers)}


def materialize_disk(disk_info: dict, store, workdir: Path, root: Path) -> Disk:
    """A private overlay over a checkpoint's sealed layers (fetched once into a shared,
    read-only local cache ``<root>/layers``, their backing links pointed at that cache)."""
    base = Path(disk_info["base"])
    if not base.is_file():
        raise CheckpointError(f"base disk {base} of this checkpoint is missing: {SETUP_HINT}")
    if disk_info.get("base_id") and disk_info["base_id"] != file_id(base):
        raise CheckpointError(
            f"base disk {base} was rebuilt since this checkpoint; its disk layers no longer apply"
        )
    ldir = root / "layers"
    ldir.mkdir(parents=True, exist_ok=True)
    prev = base
    for sha in disk_info.get("layers", []):
        path = ldir / f"{sha}.qcow2"
        if not path.exists():
            tmp = ldir / f".{sha}.{uuid.uuid4().hex[:8]}.part"
            try:
                store.get_file(f"disks/{sha}", tmp)
                qemu_img("rebase", "-u", "-f", "qcow2", "-b", str(prev), "-F", "qcow2", str(tmp))
                tmp.chmod(0o444)
                os.replace(tmp, path)
            except KeyError as exc:
                raise CheckpointError(f"disk layer {sha} is not in the store") from exc
            finally:
                tmp.unlink(missing_ok=True)
        prev = path
    return new_overlay(workdir, prev, disk_info.get("layers", []))


def collect_layers(root: Path, referenced: set[str], grace_s: float) -> tuple[int, int]:
    """Drop cached disk layers (``<root>/layers/<sha>.qcow2``) no reachable checkpoint
    names. A running VM that still has one open keeps reading it (the inode lives on)."""
    ldir = root / "layers"
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
