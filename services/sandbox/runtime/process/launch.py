"""Namespaces and launch: a sandbox's overlays mounted and its bubblewrap holder started (PID,
mount, IPC, UTS and, unless its network policy allows more, network namespaces), liveness,
port forwards, stop.

A mixin of :class:`~services.sandbox.runtime.process.runtime.ProcessRuntime`; it uses the
runtime's ``root``, ``images_dir``, tools (``bwrap``, ``nsenter``, ``setpriv``) and ``_lock``.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal as signal_mod
import subprocess
import time
from pathlib import Path

from services.sandbox.runtime.base import (
    GUEST_HOME,
    Runtime,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxSpec,
    UnsupportedOperation,
    VMHandle,
)
from services.sandbox.runtime.portforward import PortForwarder, connect_in_netns
from services.sandbox.runtime.process.cgroups import CommandCgroups
from services.sandbox.runtime.process.fstree import (
    OVERLAYS,
)
from services.sandbox.runtime.process.host import (
    _mount_overlay,
    _pid_ns,
    _umount,
)


class LaunchMixin(Runtime):
    """create / stop / destroy, liveness and port forwards."""

    _cgroups: CommandCgroups

    # -- lifecycle

    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        self._require()
        if spec.network.mode == "allowlist":
            raise UnsupportedOperation(
                "runtime 'process' cannot restrict the network to an allowlist; "
                "use network mode 'none' or the microvm runtime"
            )
        workdir = Path(workdir)
        for sub in ("upper", "work", "mnt"):
            for ov in OVERLAYS:
                (workdir / sub / ov).mkdir(parents=True, exist_ok=True)
        return self._start(sandbox_id, spec, workdir, restored_from=None)

    def _start(
        self, sandbox_id: str, spec: SandboxSpec, workdir: Path, restored_from: str | None
    ) -> VMHandle:
        lowers = self._image_layers(spec.image)
        mounted: list[Path] = []
        try:
            for ov in OVERLAYS:
                target = workdir / "mnt" / ov
                _umount(target)
                _mount_overlay(target, lowers[ov], workdir / "upper" / ov, workdir / "work" / ov)
                mounted.append(target)
            (workdir / "mnt" / "root" / GUEST_HOME.lstrip("/")).mkdir(parents=True, exist_ok=True)
            init_pid, outer = self._spawn_holder(spec, workdir)
        except BaseException:
            for target in reversed(mounted):
                _umount(target)
            raise
        ns = _pid_ns(init_pid)
        return VMHandle(
            sandbox_id=sandbox_id,
            runtime=self.name,
            workdir=workdir,
            spec=spec,
            pid=init_pid,
            restored_from=restored_from,
            data={"outer_pid": outer, "pid_ns": ns},
        )

    def _spawn_holder(self, spec: SandboxSpec, workdir: Path) -> tuple[int, int]:
        mnt = workdir / "mnt"
        argv = [
            str(self.bwrap),
            "--bind", str(mnt / "root"), "/",
            "--bind", str(mnt / "usr"), "/usr",
            "--dev", "/dev",
            "--proc", "/proc",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox",
            "--chdir", "/",
        ]  # fmt: skip
        if spec.network.mode == "none":
            argv.append("--unshare-net")
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
                pass_fds=(w,),
                start_new_session=True,
            )
        finally:
            os.close(w)
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
        for ov in reversed(OVERLAYS):
            _umount(Path(h.workdir) / "mnt" / ov)

    def destroy(self, h: VMHandle) -> None:
        self.stop(h)
        shutil.rmtree(h.workdir, ignore_errors=True)
