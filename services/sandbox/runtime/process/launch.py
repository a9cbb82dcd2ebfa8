"""Namespaces and launch: a sandbox's overlays mounted and its bubblewrap holder started (PID,
mount, IPC, UTS and network namespaces), the host folders shared read-only (``ro_binds``),
liveness, port forwards, egress, stop.

The sandbox's network namespace has only loopback. Network mode ``allowlist`` gives each allowed
``host:port`` a listener inside it at ``127.0.0.(100+i):port`` (:func:`guest_addresses`; a host
name is also put in the guest's ``/etc/hosts``) whose connections the service pipes to the
destination from the host: the guest reaches those destinations and nothing else.

A mixin of :class:`~services.sandbox.runtime.process.runtime.ProcessRuntime`; it uses the
runtime's ``root``, ``images_dir``, tools (``bwrap``, ``nsenter``, ``setpriv``) and ``_lock``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import selectors
import shutil
import signal as signal_mod
import socket
import subprocess
import time
from pathlib import Path

from services.sandbox.runtime.base import (
    GUEST_HOME,
    Runtime,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxSpec,
    VMHandle,
)
from services.sandbox.runtime.beneath import GuestTree
from services.sandbox.runtime.portforward import PortForwarder, connect_in_netns, listen_in_netns
from services.sandbox.runtime.process import idmap
from services.sandbox.runtime.process.cgroups import CommandCgroups
from services.sandbox.runtime.process.confine import program_fd
from services.sandbox.runtime.process.fstree import (
    OVERLAYS,
)
from services.sandbox.runtime.process.host import (
    _bind,
    _mount_overlay,
    _pid_ns,
    _umount,
    _unbind,
)
from services.sandbox.runtime.process.uids import UidPool

STAGE_ROOT = Path("/run/k3stack-process")
"""Parent of every sandbox's stage (:meth:`LaunchMixin._stage`)."""


def guest_addresses(spec: SandboxSpec) -> dict[str, str]:
    """``host:port`` -> where the guest dials it (a pure function of the allowlist)."""
    return {
        dest: f"127.0.0.{100 + i}:{dest.rsplit(':', 1)[1]}"
        for i, dest in enumerate(spec.network.allow)
    }


def _guest_tree(mnt_root: Path) -> GuestTree:
    """The sandbox's mounted overlays as the guest sees them, resolved beneath their roots."""
    return GuestTree({point: mnt_root.parent / ov for ov, point in OVERLAYS.items()})


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class LaunchMixin(Runtime):
    """create / stop / destroy, liveness, port forwards and egress."""

    _cgroups: CommandCgroups
    _egress: dict[str, list[PortForwarder]]
    ro_binds: tuple[Path, ...]
    guest_uid: int
    root: Path
    images_dir: Path
    _uids: UidPool

    def guest_addresses(self, spec: SandboxSpec) -> dict[str, str]:
        return guest_addresses(spec)

    # -- lifecycle

    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        self._require()
        workdir = Path(workdir)
        for sub in ("upper", "work", "mnt"):
            for ov in OVERLAYS:
                (workdir / sub / ov).mkdir(parents=True, exist_ok=True)
        return self._start(sandbox_id, spec, workdir, restored_from=None)

    def _start(
        self, sandbox_id: str, spec: SandboxSpec, workdir: Path, restored_from: str | None
    ) -> VMHandle:
        lowers = self._image_layers(spec.image)
        # images and workdirs the service's alone: a guest's uid that left its namespaces must
        # not walk into another sandbox's files (stored as the canonical uid)
        for folder in (self.root, workdir):
            os.chmod(folder, 0o700)
        mounted: list[Path] = []
        uid = self._uids.claim(sandbox_id)
        try:
            stage = self._stage(sandbox_id)
            mounted += self._mount_overlays(sandbox_id, workdir, lowers, uid)
            for ov in OVERLAYS:
                mounted.append(self._stage_one(workdir / "mnt" / ov, stage / ov, uid))
            for i, folder in enumerate(self._shared_folders()):
                mounted.append(self._stage_one(folder, stage / f"ro{i}", uid))
            # the tree may come from a checkpoint the guest wrote: never follow its symlinks out
            _guest_tree(workdir / "mnt" / "root").make_dirs(GUEST_HOME)
            self._write_hosts(spec, mnt_root=workdir / "mnt" / "root")
            init_pid, outer = self._spawn_holder(sandbox_id, uid)
        except BaseException:
            for target in reversed(mounted):
                _unbind(target)
            self._unstage(sandbox_id)
            self._uids.release(uid, sandbox_id)
            raise
        ns = _pid_ns(init_pid)
        self._open_egress(sandbox_id, spec, init_pid)
        return VMHandle(
            sandbox_id=sandbox_id,
            runtime=self.name,
            workdir=workdir,
            spec=spec,
            pid=init_pid,
            restored_from=restored_from,
            data={"outer_pid": outer, "pid_ns": ns, "guest_uid": uid},
        )

    def _mount_overlays(
        self, sandbox_id: str, workdir: Path, lowers: dict[str, list[Path]], uid: int
    ) -> list[Path]:
        """The sandbox's overlays at ``workdir/mnt/<ov>``, built from idmapped binds of its
        upper folders and of the runtime's own layers in which the canonical owner
        (``guest_uid``) shows as the sandbox's ``uid`` (:mod:`~.idmap`); the host's ``/usr``
        is taken as it is. The binds are detached once the overlays hold their layers."""
        maps = STAGE_ROOT / ".idmap" / sandbox_id
        idmap.unbind_all(maps)  # what a crashed start left
        maps.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(maps.parent, 0o700)  # the service's alone
        mounted: list[Path] = []
        try:
            with idmap.mapping(self.guest_uid, uid) as userns:
                rw = idmap.bind(workdir, maps / "rw", userns)  # upper and work: one mount
                for ov in OVERLAYS:
                    target = workdir / "mnt" / ov
                    _umount(target)
                    # the overlay's root (/ or /usr) belongs to the guest's root; set before
                    # the mount, which takes the root's owner once
                    os.chown(workdir / "upper" / ov, self.guest_uid, self.guest_uid)
                    layers = [
                        idmap.bind(low, maps / f"{ov}{i}", userns)
                        if low.is_relative_to(self.images_dir) else low
                        for i, low in enumerate(lowers[ov])
                    ]  # fmt: skip
                    _mount_overlay(target, layers, rw / "upper" / ov, rw / "work" / ov)
                    mounted.append(target)
        except BaseException:
            for target in reversed(mounted):
                _unbind(target)
            raise
        finally:
            idmap.unbind_all(maps)
        return mounted

    @staticmethod
    def _stage(sandbox_id: str) -> Path:
        """Where the sandbox's overlays (and shared folders) are bound for bubblewrap to reach
        as the guest's uid: ``/run/k3stack-process/<sandbox id>/{root,usr,ro<i>}``, that folder
        the guest uid's alone (sandbox ids are unique per instance)."""
        base = STAGE_ROOT
        if not base.is_dir():
            base.mkdir(parents=True, exist_ok=True)
            os.chmod(base, 0o711)  # walkable, not listable
        return base / sandbox_id

    @staticmethod
    def _stage_one(source: Path, at: Path, uid: int) -> Path:
        at.mkdir(parents=True, exist_ok=True)
        os.chown(at.parent, uid, uid)  # no other host user (nor sandbox) walks in
        os.chmod(at.parent, 0o700)
        _unbind(at)
        _bind(source, at)
        return at

    def _unstage(self, sandbox_id: str) -> None:
        stage = self._stage(sandbox_id)
        staged = sorted(stage.iterdir()) if stage.is_dir() else []
        for d in staged:
            _unbind(d)
        for d in (*staged, stage):
            try:
                d.rmdir()  # never a recursive removal: a mount still there must stay whole
            except OSError:
                pass

    def _shared_folders(self) -> list[Path]:
        """The ``ro_binds`` that exist (the agent cache, for installed-agent episodes)."""
        return [Path(f) for f in self.ro_binds if Path(f).is_dir()]

    def _spawn_holder(self, sandbox_id: str, uid: int) -> tuple[int, int]:
        """bubblewrap, started as the sandbox's own unprivileged host uid, in its own user
        namespace (the guest's root is that uid), every capability dropped, the seccomp filter
        loaded.

        It runs unprivileged, so it binds the overlays from their stage (:meth:`_stage`): the
        service's own folders above the workdir may be closed to that uid."""
        stage = self._stage(sandbox_id)
        argv = [
            str(self.setpriv), "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--",
            str(self.bwrap),
            "--unshare-user", "--uid", "0", "--gid", "0",
            "--bind", str(stage / "root"), "/",
            "--bind", str(stage / "usr"), "/usr",
            "--dev", "/dev",
            "--proc", "/proc",  # bwrap covers /proc/sys, sysrq-trigger, irq, bus read-only
            "--tmpfs", "/sys", "--remount-ro", "/sys",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--unshare-net",
            "--hostname", "sandbox",
            "--cap-drop", "ALL",
            "--chdir", "/",
        ]  # fmt: skip
        for i, folder in enumerate(self._shared_folders()):  # read-only at the same path
            argv += ["--ro-bind", str(stage / f"ro{i}"), str(folder)]
        fds = [program_fd()]
        argv += ["--seccomp", str(fds[0])]
        r, w = os.pipe()
        # The command prints a line once bwrap has built the whole mount tree and exec'd it:
        # only then may execs enter (the info fd is written before the mounts are done).
        argv += ["--info-fd", str(w), "--", "/bin/sh", "-c", "echo ready; exec sleep infinity"]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(w, *fds),
                start_new_session=True,
            )
        finally:
            os.close(w)
            for fd in fds:
                os.close(fd)
        info = b""
        deadline = time.monotonic() + 10
        with os.fdopen(r, "rb", buffering=0) as rf:
            sel = selectors.DefaultSelector()
            sel.register(rf, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(timeout=0.05):
                    if proc.poll() is not None:
                        break
                    continue
                chunk = rf.read(4096)
                if not chunk:
                    break
                info += chunk
                try:
                    json.loads(info)
                    break
                except ValueError:
                    continue
            sel.close()
        try:
            init_pid = int(json.loads(info)["child-pid"])
        except (ValueError, KeyError):
            err = b""
            if proc.poll() is None:
                proc.kill()
            try:
                _, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            raise RuntimeUnavailable(
                f"bwrap did not start the sandbox: {err.decode(errors='replace').strip()}"
            ) from None
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout=max(0.1, deadline - time.monotonic()))
        sel.close()
        line = proc.stdout.readline() if ready else b""
        proc.stdout.close()
        if line.strip() != b"ready":
            if proc.poll() is None:
                proc.kill()
            raise RuntimeUnavailable(f"sandbox init did not start (got {line!r})")
        # stderr stays a pipe we never read; bwrap writes nothing once the sandbox is up.
        with self._lock:
            self._children[proc.pid] = proc
        return init_pid, proc.pid

    @staticmethod
    def _write_hosts(spec: SandboxSpec, mnt_root: Path) -> None:
        names = [
            (guest.rsplit(":", 1)[0], dest.rsplit(":", 1)[0])
            for dest, guest in guest_addresses(spec).items()
            if not _is_address(dest.rsplit(":", 1)[0])
        ]
        if not names:
            return
        tree = _guest_tree(mnt_root)  # never follows a checkpointed tree's symlinks out
        try:
            with os.fdopen(tree.open_read("/etc/hosts"), "r") as fh:
                base = fh.read(1 << 20)
        except OSError:
            base = "127.0.0.1 localhost\n"
        kept = [ln for ln in base.splitlines() if not ln.startswith("127.0.0.1")
                or "localhost" in ln]  # fmt: skip
        with os.fdopen(tree.open_write("/etc/hosts", 0o644), "w") as fh:
            fh.write("\n".join([*kept, *(f"{ip} {name}" for ip, name in names)]) + "\n")

    def _open_egress(self, sandbox_id: str, spec: SandboxSpec, init_pid: int) -> None:
        """One listener in the sandbox's network namespace per allowed destination."""
        if spec.network.mode != "allowlist":
            return
        netns = f"/proc/{init_pid}/ns/net"
        forwards = []
        try:
            for dest, guest in guest_addresses(spec).items():
                host, port = dest.rsplit(":", 1)
                target = (spec.network.pinned.get(dest) or host.strip("[]"), int(port))
                gaddr = guest.rsplit(":", 1)
                listener = listen_in_netns(netns, (gaddr[0], int(gaddr[1])))
                forwards.append(
                    PortForwarder(
                        lambda t=target: socket.create_connection(t, timeout=10),
                        f"egress-{port}", listener=listener,
                    )
                )  # fmt: skip
        except OSError as exc:
            for fwd in forwards:
                fwd.close()
            raise RuntimeUnavailable(f"cannot open the sandbox's egress: {exc}") from exc
        with self._lock:
            self._egress[sandbox_id] = forwards

    def is_alive(self, h: VMHandle) -> bool:
        ns = h.data.get("pid_ns")
        return bool(h.pid and ns) and _pid_ns(h.pid or 0) == ns

    def _check_alive(self, h: VMHandle) -> None:
        if not self.is_alive(h):
            raise SandboxNotRunning(f"sandbox {h.sandbox_id} is not running")

    def expose_port(self, h: VMHandle, port: int) -> str:
        """A host loopback forwarder whose connections are opened inside the sandbox's network
        namespace (see :mod:`~services.sandbox.runtime.portforward`)."""
        self._check_alive(h)
        netns = f"/proc/{h.pid}/ns/net"
        with self._lock:
            fwd = self._forwards.get((h.sandbox_id, port))
            if fwd is None:
                fwd = PortForwarder(lambda: connect_in_netns(netns, port), f"fwd-{port}")
                self._forwards[(h.sandbox_id, port)] = fwd
        return fwd.address

    def _close_forwards(self, sandbox_id: str) -> None:
        with self._lock:
            mine = [k for k in self._forwards if k[0] == sandbox_id]
            forwards = [self._forwards.pop(k) for k in mine]
        for fwd in forwards:
            fwd.close()

    def stop(self, h: VMHandle) -> None:
        self._close_forwards(h.sandbox_id)
        with self._lock:
            egress = self._egress.pop(h.sandbox_id, [])
        for fwd in egress:
            fwd.close()
        with self._lock:
            self._execs.pop(h.sandbox_id, None)
            self._gates.pop(h.sandbox_id, None)
        if h.pid and _pid_ns(h.pid) == h.data.get("pid_ns"):
            try:
                os.kill(h.pid, signal_mod.SIGKILL)  # init of the PID namespace: all go with it
            except ProcessLookupError:
                pass
        outer = h.data.get("outer_pid")
        with self._lock:
            proc = self._children.pop(outer, None) if outer else None
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            if proc.stderr:
                proc.stderr.close()
        deadline = time.monotonic() + 5
        while h.pid and _pid_ns(h.pid) == h.data.get("pid_ns") and time.monotonic() < deadline:
            time.sleep(0.005)
        self._cgroups.remove_sandbox(h.sandbox_id)
        self._unstage(h.sandbox_id)
        for ov in reversed(OVERLAYS):
            _umount(Path(h.workdir) / "mnt" / ov)
        self._uids.release(h.data.get("guest_uid"), h.sandbox_id)

    def destroy(self, h: VMHandle) -> None:
        self.stop(h)
        shutil.rmtree(h.workdir, ignore_errors=True)
