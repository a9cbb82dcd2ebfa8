"""What a crashed process-runtime service left: sandboxes nobody re-attached at start.

A sandbox of this instance is known by its overlays: they are mounted at its workdir
(``<data>/sandbox/vms/<id>/mnt/{root,usr}``) and bound into its stage
(``/run/k3stack-process/<id>/…``) with an ``upperdir`` under this instance's data folder — or,
with per-sandbox uids, under the idmapped bind of that folder
(``/run/k3stack-process/.idmap/<id>/rw``), counted only when ``<data>/sandbox/vms/<id>`` is this
instance's — so another instance's stages (another data folder) never match. Its holder is the ``bwrap`` whose
command line binds that stage; the sandbox's processes die with the holder's child, the init
of its PID namespace.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def mounted_sandboxes(data: Path, stage_root: Path) -> set[str]:
    """Ids of sandboxes whose overlays, made from ``data`` (``<data_dir>/sandbox``), are
    mounted in their workdir or stage."""
    vms, idmaps, out = data / "vms", stage_root / ".idmap", set()
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        pre, _, post = line.partition(" - ")
        fields, sup = pre.split(), post.split()
        if len(fields) < 5 or len(sup) < 3 or sup[0] != "overlay":
            continue
        upper = next(
            (o[len("upperdir=") :] for o in sup[2].split(",") if o.startswith("upperdir=")), ""
        )
        if upper.startswith(f"{idmaps}/"):
            if not (vms / Path(upper).relative_to(idmaps).parts[0]).is_dir():
                continue  # another instance's sandbox
        elif not upper.startswith(f"{vms}/"):
            continue
        point = Path(fields[4].replace("\\040", " "))
        for parent in (stage_root, vms):
            if point.is_relative_to(parent) and len(point.relative_to(parent).parts) >= 2:
                out.add(point.relative_to(parent).parts[0])
    return out


def holder_pids(stage: Path) -> list[int]:
    """The ``bwrap`` holding a sandbox (its command line binds ``<stage>/root``) and its
    children (the sandbox's init)."""
    want = f"\0{stage / 'root'}\0".encode()
    holders, parents = [], {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if want in b"\0" + (d / "cmdline").read_bytes():
                holders.append(int(d.name))
            ppid = int((d / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            parents[int(d.name)] = ppid
        except (OSError, ValueError, IndexError):
            continue
    children = [pid for pid, ppid in parents.items() if ppid in holders]
    return children + holders


def kill_all(pids: list[int], wait_s: float = 5.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        for pid in pids:  # our own children are reaped; the others go to init
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.02)


__all__ = ["holder_pids", "kill_all", "mounted_sandboxes"]
