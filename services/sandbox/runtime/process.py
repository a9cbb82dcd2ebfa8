"""The ``process`` runtime: Linux namespaces (bubblewrap) over overlayfs, for hosts without QEMU.

A sandbox is a bubblewrap process tree in its own PID, mount, IPC, UTS (and, unless the network
policy allows more, network) namespaces, whose root is an overlayfs: writes land in an upper
directory under the sandbox's workdir, reads fall through to the image. The image is the host's
``/usr`` (a second overlay, so a sandbox may ``pip install`` into ``/usr/local`` without touching
the host) under a skeleton root with a private copy of ``/etc``, plus any template layers built
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

Not a security boundary: guest processes run as root in their namespaces with a reduced
capability bounding set (Docker's default set); cpu/memory limits are not enforced.
Requires root (overlay mounts), ``bwrap`` (Debian: ``apt-get install bubblewrap``), and
util-linux's ``nsenter`` and ``setpriv``.
"""

from __future__ import annotations

import codecs
import ctypes
import ctypes.util
import errno as errno_mod
import hashlib
import json
import logging
import os
import secrets
import selectors
import shutil
import signal as signal_mod
import stat as stat_mod
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.sandbox.runtime.base import (
    GUEST_HOME,
    CheckpointError,
    CheckpointManifest,
    ExecEvent,
    ExecRequest,
    ExecResult,
    FileInfo,
    GuestFileError,
    GuestFileNotFound,
    GuestFileTooLarge,
    GuestPathError,
    Runtime,
    RuntimeCapabilities,
    RuntimeUnavailable,
    SandboxNotRunning,
    SandboxSpec,
    UnsupportedOperation,
    VMHandle,
    normalize_guest_path,
)
from services.sandbox.runtime.portforward import PortForwarder, connect_in_netns

if TYPE_CHECKING:
    from shared.objectstore import ObjectStore

log = logging.getLogger("k3stack.sandbox.process")

BUILTIN_IMAGES = ("busybox", "debian", "host")
"""Image names that select the host image (skeleton root + host ``/usr``)."""

OVERLAYS: dict[str, str] = {"root": "/", "usr": "/usr"}
"""Overlay name -> guest mount point. Each has its own upper directory and checkpoint tree."""

BLOB_PREFIX = "sandbox/blobs/"
TREE_PREFIX = "sandbox/process/trees/"
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""Per stream, per foreground exec: output past this is dropped and the result says so."""
DRAIN_AFTER_EXIT_S = 0.05
"""After the command exits, how long to keep reading output its background children may hold."""

GUEST_PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KEEP_CAPS = (
    "chown,dac_override,fowner,fsetid,kill,setgid,setuid,setpcap,net_bind_service,net_raw,"
    "sys_chroot,mknod,audit_write,setfcap"
)
"""Capabilities guest processes keep (Docker's default set); no sys_admin, so no remounting."""

BG_SCRIPT = (
    "mkdir -p /tmp/.k3s && setsid /bin/sh -c 'exec >/tmp/.k3s/bg-$$.out 2>/tmp/.k3s/bg-$$.err "
    '</dev/null; exec "$@"\' sh "$@" & echo $!'
)
"""Starts ``"$@"`` in its own session with output to ``/tmp/.k3s/bg-<pid>.*``; prints its pid."""

_SKIP_ETC = {"shadow", "shadow-", "gshadow", "gshadow-", "ssh", "ssl/private", "machine-id"}
_OPAQUE_XATTR = "trusted.overlay.opaque"
_MS_RDONLY = 1
_MNT_DETACH = 2


# --------------------------------------------------------------------------- host helpers


_libc: Any = None


def _libc_call() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _mount_overlay(target: Path, lowers: list[Path], upper: Path, work: Path) -> None:
    opts = f"lowerdir={':'.join(str(p) for p in lowers)},upperdir={upper},workdir={work}"
    rc = _libc_call().mount(b"overlay", str(target).encode(), b"overlay", 0, opts.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise RuntimeUnavailable(
            f"cannot mount overlayfs at {target}: {os.strerror(err)} (the process runtime needs "
            "root and overlayfs; use the microvm runtime otherwise)"
        )


def _umount(target: Path) -> None:
    if os.path.ismount(target):
        _libc_call().umount2(str(target).encode(), _MNT_DETACH)


def _pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _ns_members(init_pid: int, ns: str) -> list[int]:
    """Host pids of the processes in the sandbox's PID namespace, except its init."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid != init_pid and _pid_ns(pid) == ns:
            out.append(pid)
    return out


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2 : data.rindex(b")") + 3].decode()
    except (OSError, ValueError):
        return "?"


def _guest_errno(exc: OSError, gpath: str) -> GuestFileError:
    if isinstance(exc, FileNotFoundError):
        return GuestFileNotFound(f"{gpath}: no such file or directory", errno_mod.ENOENT, gpath)
    code = exc.errno or 0
    return GuestFileError(f"{gpath}: {os.strerror(code) if code else exc}", code, gpath)


# --------------------------------------------------------------------------- filesystem trees


def _walk_upper(upper: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of everything under ``upper``, parents before children."""
    stack = [""]
    while stack:
        rel = stack.pop()
        base = upper / rel if rel else upper
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            yield path, st
            if stat_mod.S_ISDIR(st.st_mode):
                stack.append(path)


def _entry(upper: Path, rel: str, st: os.stat_result) -> dict[str, Any]:
    """Checkpoint tree entry of one upper-dir object (blob key filled in by the caller)."""
    mode = st.st_mode
    e: dict[str, Any] = {
        "p": rel,
        "m": stat_mod.S_IMODE(mode),
        "u": st.st_uid,
        "g": st.st_gid,
        "mt": st.st_mtime_ns,
    }
    full = upper / rel
    if stat_mod.S_ISDIR(mode):
        e["t"] = "d"
        try:
            if os.getxattr(full, _OPAQUE_XATTR, follow_symlinks=False) == b"y":
                e["o"] = 1
        except OSError:
            pass
    elif stat_mod.S_ISREG(mode):
        e["t"] = "f"
        e["s"] = st.st_size
    elif stat_mod.S_ISLNK(mode):
        e["t"] = "l"
        e["l"] = os.readlink(full)
    elif stat_mod.S_ISCHR(mode) and st.st_rdev == 0:
        e["t"] = "w"  # overlayfs whiteout: the file is deleted in this layer
    elif stat_mod.S_ISFIFO(mode):
        e["t"] = "p"
    else:
        e["t"] = "x"  # sockets and device nodes are not carried over
    return e


def _local_key(st: os.stat_result) -> list[int]:
    """What must be unchanged for a file's stored blob to still be its content."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


# --------------------------------------------------------------------------- the runtime


class ProcessRuntime(Runtime):
    """bubblewrap + overlayfs sandboxes under ``root`` (images there; sandboxes in workdirs)."""

    name = "process"
    capabilities = RuntimeCapabilities(memory_checkpoint=False, fork=True, network_allowlist=False)

    def __init__(self, root: Path, bwrap: str | None = None) -> None:
        self.root = Path(root)
        self.images_dir = self.root / "images"
        self.bwrap = bwrap or shutil.which("bwrap")
        self.nsenter = shutil.which("nsenter")
        self.setpriv = shutil.which("setpriv")
        self._lock = threading.Lock()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._execs: dict[str, set[subprocess.Popen[bytes]]] = {}
        self._gates: dict[str, threading.Lock] = {}
        self._forwards: dict[tuple[str, int], PortForwarder] = {}

    # -- availability and images

    def available(self) -> tuple[bool, str]:
        if not self.bwrap:
            return False, "bwrap not on PATH: apt-get install -y bubblewrap"
        if not self.nsenter or not self.setpriv:
            return False, "nsenter/setpriv (util-linux) not on PATH"
        if os.geteuid() != 0:
            return False, "the process runtime mounts overlayfs and needs root"
        return True, f"bubblewrap ({self.bwrap}) over overlayfs; checkpoints cover files only"

    def _require(self) -> None:
        ok, why = self.available()
        if not ok:
            raise RuntimeUnavailable(f"process runtime unavailable: {why}")

    def _skeleton(self) -> Path:
        """The host image's root: empty top-level dirs, merged-/usr links, a copy of /etc."""
        skel = self.images_dir / "_host" / "root"
        if (skel / ".k3s-ready").exists():
            return skel
        with self._lock:
            if (skel / ".k3s-ready").exists():
                return skel
            tmp = skel.with_name(f"root.tmp-{secrets.token_hex(4)}")
            tmp.mkdir(parents=True)
            for d in (
                "usr",
                "tmp",
                "root",
                "home/user",
                "proc",
                "dev",
                "sys",
                "run",
                "var/tmp",
                "var/log",
                "opt",
                "mnt",
                "srv",
            ):
                (tmp / d).mkdir(parents=True, exist_ok=True)
            os.chmod(tmp / "tmp", 0o1777)
            os.chmod(tmp / "var/tmp", 0o1777)
            for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
                host = Path("/") / name
                if host.is_symlink():
                    os.symlink(os.readlink(host), tmp / name)
                elif (Path("/usr") / name).is_dir():
                    os.symlink(f"usr/{name}", tmp / name)

            def ignore(folder: str, names: list[str]) -> set[str]:
                rel = os.path.relpath(folder, "/etc")
                return {
                    n
                    for n in names
                    if n in _SKIP_ETC or os.path.normpath(f"{rel}/{n}") in _SKIP_ETC
                }

            shutil.copytree(
                "/etc", tmp / "etc", symlinks=True, ignore=ignore, ignore_dangling_symlinks=True
            )
            (tmp / "etc" / "hostname").write_text("sandbox\n")
            (tmp / "etc" / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
            (tmp / ".k3s-ready").write_text("1\n")
            if skel.exists():
                shutil.rmtree(skel)
            os.replace(tmp, skel)
        return skel

    def _image_layers(self, image: str) -> dict[str, list[Path]]:
        """Lower dirs of each overlay for ``image``, top layer first."""
        skel = self._skeleton()
        lowers: dict[str, list[Path]] = {"root": [], "usr": []}
        if image not in BUILTIN_IMAGES:
            meta = self.images_dir / image / "image.json"
            if not meta.exists():
                raise RuntimeUnavailable(
                    f"process image {image!r} is not built; build it as a template first "
                    f"(built-in images: {', '.join(BUILTIN_IMAGES)})"
                )
            for layer in json.loads(meta.read_text())["layers"]:
                for name in OVERLAYS:
                    lowers[name].append(Path(layer) / name)
        lowers["root"].append(skel)
        lowers["usr"].append(Path("/usr"))
        return lowers

    def image_env(self, image: str) -> dict[str, str]:
        """Environment a template's ENV steps set (empty for built-in images)."""
        meta = self.images_dir / image / "image.json"
        if image in BUILTIN_IMAGES or not meta.exists():
            return {}
        return dict(json.loads(meta.read_text()).get("env", {}))

    def has_image(self, image: str) -> bool:
        return image in BUILTIN_IMAGES or (self.images_dir / image / "image.json").exists()

    def build_image(
        self,
        name: str,
        base: str | None,
        steps: list[dict[str, Any]],
        log_line: Any = None,
    ) -> dict[str, Any]:
        """Build image ``name``: run ``steps`` in a sandbox of ``base``, keep its changes as a layer.

        Steps: ``{"type": "RUN", "args": ["cmd ..."]}`` (through ``/bin/sh -c``, must exit 0),
        ``{"type": "ENV", "args": ["KEY", "value"]}``. Returns the image description.
        """
        self._require()
        say = log_line or (lambda _line: None)
        base = base or "host"
        env = self.image_env(base)
        build_id = f"build-{name}-{secrets.token_hex(4)}"
        workdir = self.images_dir / ".builds" / build_id
        h = self.create(build_id, SandboxSpec(image=base, env=env), workdir)
        try:
            for i, step in enumerate(steps):
                kind = str(step.get("type", "")).upper()
                args = [str(a) for a in step.get("args", [])]
                say(f"step {i + 1}/{len(steps)}: {kind} {' '.join(args)}")
                if kind == "RUN":
                    res = self.exec(
                        h, ExecRequest(cmd=" ".join(args), env=env, cwd="/", timeout_s=1800)
                    )
                    for line in (res.stdout + res.stderr).splitlines()[-50:]:
                        say(line)
                    if res.exit_code != 0:
                        raise CheckpointError(
                            f"step {i + 1} ({kind} {' '.join(args)}) exited {res.exit_code}"
                            + (" (timed out)" if res.timed_out else "")
                        )
                elif kind == "ENV":
                    if len(args) != 2:
                        raise ValueError(f"step {i + 1}: ENV takes KEY and value, got {args}")
                    env[args[0]] = args[1]
                else:
                    raise ValueError(f"step {i + 1}: unknown step type {kind!r} (RUN, ENV)")
            self.stop(h)
            dest = self.images_dir / name
            layer = dest / "layer"
            if dest.exists():
                shutil.rmtree(dest)
            layer.mkdir(parents=True)
            for ov in OVERLAYS:
                os.replace(workdir / "upper" / ov, layer / ov)
            base_layers: list[str] = []
            if base not in BUILTIN_IMAGES:
                base_layers = json.loads((self.images_dir / base / "image.json").read_text())[
                    "layers"
                ]
            image = {"name": name, "base": base, "layers": [str(layer), *base_layers], "env": env}
            (dest / "image.json").write_text(json.dumps(image))
            say(f"image {name} ready")
            return image
        finally:
            self.destroy(h)

    def delete_image(self, name: str) -> None:
        if name not in BUILTIN_IMAGES:
            shutil.rmtree(self.images_dir / name, ignore_errors=True)

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
        for ov in reversed(OVERLAYS):
            _umount(Path(h.workdir) / "mnt" / ov)

    def destroy(self, h: VMHandle) -> None:
        self.stop(h)
        shutil.rmtree(h.workdir, ignore_errors=True)

    # -- checkpoints

    def _gate(self, sandbox_id: str) -> threading.Lock:
        """Held while an exec starts its ``nsenter`` and while a checkpoint has the sandbox frozen."""
        with self._lock:
            return self._gates.setdefault(sandbox_id, threading.Lock())

    def _freeze(self, h: VMHandle) -> list[int]:
        """SIGSTOP every running process of the sandbox; returns those to continue, in order.

        The ``nsenter`` of each running exec is stopped first, and only once it is stopped are
        the sandbox's processes: ``nsenter`` waits for its child with ``WUNTRACED`` and, when it
        sees the child stopped, stops itself and continues the child only after it is itself
        continued. Stopped after its child, it would see the stop after the thaw and stay stopped
        for good, holding the exec's pipes open until its time limit. Stopped before (and
        continued after) its child, it never sees a stopped child (a continued child reports no
        stop), so the exec runs on as if nothing happened.
        """
        stopped: list[int] = []
        ns = h.data.get("pid_ns")
        if not h.pid or not ns:
            return stopped
        with self._lock:
            execs = list(self._execs.get(h.sandbox_id, ()))
        outer = []
        for proc in execs:
            try:
                os.kill(proc.pid, signal_mod.SIGSTOP)
                outer.append(proc.pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        for pid in outer:
            while _proc_state(pid) not in ("T", "t", "Z", "?") and time.monotonic() < deadline:
                time.sleep(0.001)
        for _ in range(3):  # processes forked during the sweep get the next one
            fresh = [p for p in _ns_members(h.pid, ns) if p not in stopped]
            if not fresh:
                break
            for pid in fresh:
                if _proc_state(pid) in ("T", "t", "Z"):
                    continue
                try:
                    os.kill(pid, signal_mod.SIGSTOP)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass
        return stopped + outer  # the sandbox's processes are continued before the nsenters

    @staticmethod
    def _thaw(pids: list[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal_mod.SIGCONT)
            except ProcessLookupError:
                pass

    def checkpoint(
        self, h: VMHandle, parent: CheckpointManifest | None, store: ObjectStore
    ) -> CheckpointManifest:
        self._check_alive(h)
        started = time.perf_counter()
        ckpt_id = f"ckpt-{secrets.token_hex(8)}"
        workdir = Path(h.workdir)
        cache_path = workdir / "fscache.json"
        try:
            cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
        except ValueError:
            cache = {}
        cached: dict[str, Any] = cache.get("files", {})
        gate = self._gate(h.sandbox_id)
        gate.acquire()  # no exec starts while the sandbox is frozen (see _freeze)
        frozen = self._freeze(h)
        t_frozen = time.perf_counter()
        try:
            trees: dict[str, list[dict[str, Any]]] = {}
            new_cache: dict[str, Any] = {}
            sig: dict[str, list[int]] = {}
            stats = {"files": 0, "hashed": 0, "new_blobs": 0, "new_bytes": 0, "bytes": 0}
            for ov in OVERLAYS:
                upper = workdir / "upper" / ov
                entries = []
                for rel, st in _walk_upper(upper):
                    e = _entry(upper, rel, st)
                    sig[f"{ov}/{rel}"] = _signature(st)
                    if e["t"] == "f":
                        stats["files"] += 1
                        stats["bytes"] += st.st_size
                        local = _local_key(st)
                        hit = cached.get(f"{ov}/{rel}")
                        if hit and hit[0] == local:
                            e["k"] = hit[1]
                        else:
                            e["k"] = self._store_blob(upper / rel, store, stats)
                        new_cache[f"{ov}/{rel}"] = [local, e["k"]]
                    entries.append(e)
                trees[ov] = entries
        except OSError as exc:
            raise CheckpointError(f"checkpoint of {h.sandbox_id} failed: {exc}") from exc
        finally:
            self._thaw(frozen)
            gate.release()
        t_walked = time.perf_counter()
        tree_body = json.dumps({"overlays": trees}, separators=(",", ":")).encode()
        tree_key = f"{TREE_PREFIX}{ckpt_id}.json"
        store.put(tree_key, tree_body)
        manifest = CheckpointManifest(
            id=ckpt_id,
            parent_id=parent.id if parent else None,
            sandbox_id=h.sandbox_id,
            runtime=self.name,
            spec=h.spec,
            memory_bytes=0,
            stored_bytes=stats["new_bytes"] + len(tree_body),
            disk_keys={"fs": tree_key},
            runtime_data={
                "files": stats["files"],
                "hashed_files": stats["hashed"],
                "new_blobs": stats["new_blobs"],
                "fs_bytes": stats["bytes"],
            },
            stats={
                "pause_ms": (t_frozen - started) * 1000,
                "downtime_ms": (t_walked - started) * 1000,
                "total_ms": (time.perf_counter() - started) * 1000,
            },
        )
        tmp = cache_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"checkpoint": ckpt_id, "files": new_cache, "sig": sig}))
        os.replace(tmp, cache_path)
        return manifest

    object_prefixes = (BLOB_PREFIX, TREE_PREFIX)

    def referenced_keys(self, m: CheckpointManifest, store: ObjectStore) -> set[str]:
        keys = super().referenced_keys(m, store)
        tree_key = m.disk_keys.get("fs")
        if tree_key:
            for entries in json.loads(store.get(tree_key))["overlays"].values():
                keys.update(e["k"] for e in entries if e.get("k"))
        return keys

    @staticmethod
    def _store_blob(path: Path, store: ObjectStore, stats: dict[str, int]) -> str:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        stats["hashed"] += 1
        key = BLOB_PREFIX + digest.hexdigest()
        if not store.exists(key):
            info = store.put_file(key, path)
            stats["new_blobs"] += 1
            stats["new_bytes"] += info.size
        return key

    def restore(
        self,
        sandbox_id: str,
        chain: list[CheckpointManifest],
        store: ObjectStore,
        workdir: Path,
    ) -> VMHandle:
        self._require()
        if not chain:
            raise CheckpointError("restore needs at least one checkpoint")
        top = chain[-1]
        if top.runtime != self.name:
            raise UnsupportedOperation(
                f"checkpoint {top.id} was taken by runtime {top.runtime!r}; "
                "runtime 'process' restores only its own"
            )
        tree_key = top.disk_keys.get("fs")
        if not tree_key:
            raise CheckpointError(f"checkpoint {top.id} has no filesystem tree")
        try:
            tree = json.loads(store.get(tree_key))["overlays"]
        except KeyError as exc:
            raise CheckpointError(f"checkpoint {top.id}: {exc}") from exc
        workdir = Path(workdir)
        in_place = self._workdir_matches(workdir, top.id)
        if not in_place:
            self._materialize(workdir, tree, store, top.id)
        for sub in ("work", "mnt"):
            for ov in OVERLAYS:
                (workdir / sub / ov).mkdir(parents=True, exist_ok=True)
        h = self._start(sandbox_id, top.spec, workdir, restored_from=top.id)
        h.data["restore_mode"] = "in_place" if in_place else "materialized"
        return h

    def _workdir_matches(self, workdir: Path, ckpt_id: str) -> bool:
        """Whether ``workdir``'s upper dirs are exactly what checkpoint ``ckpt_id`` captured.

        True after a pause in the same workdir when nothing wrote between checkpoint and stop:
        resume then reuses the files in place instead of fetching them from the store.
        """
        for ov in OVERLAYS:
            _umount(workdir / "mnt" / ov)
        try:
            cache = json.loads((workdir / "fscache.json").read_text())
        except (OSError, ValueError):
            return False
        if cache.get("checkpoint") != ckpt_id or "sig" not in cache:
            return False
        return _upper_signature(workdir) == cache["sig"]

    def _materialize(
        self, workdir: Path, tree: dict[str, list[dict[str, Any]]], store: ObjectStore, ckpt: str
    ) -> None:
        for sub in ("upper", "work"):
            shutil.rmtree(workdir / sub, ignore_errors=True)
        (workdir / "fscache.json").unlink(missing_ok=True)
        new_cache: dict[str, Any] = {}
        dirs: list[tuple[Path, dict[str, Any]]] = []
        for ov in OVERLAYS:
            upper = workdir / "upper" / ov
            upper.mkdir(parents=True, exist_ok=True)
            for e in tree.get(ov, []):
                dest = upper / e["p"]
                kind = e["t"]
                if kind == "d":
                    dest.mkdir(exist_ok=True)
                    if e.get("o"):
                        os.setxattr(dest, _OPAQUE_XATTR, b"y", follow_symlinks=False)
                    dirs.append((dest, e))
                    continue
                if kind == "f":
                    store.get_file(e["k"], dest)
                elif kind == "l":
                    os.symlink(e["l"], dest)
                elif kind == "w":
                    os.mknod(dest, stat_mod.S_IFCHR | 0o000, os.makedev(0, 0))
                elif kind == "p":
                    os.mkfifo(dest)
                else:
                    continue
                os.lchown(dest, e["u"], e["g"])
                if kind != "l":
                    os.chmod(dest, e["m"])
                os.utime(dest, ns=(e["mt"], e["mt"]), follow_symlinks=False)
                if kind == "f":
                    new_cache[f"{ov}/{e['p']}"] = [_local_key(os.lstat(dest)), e["k"]]
        for dest, e in reversed(dirs):  # children first, so their writes do not bump mtimes
            os.lchown(dest, e["u"], e["g"])
            os.chmod(dest, e["m"])
            os.utime(dest, ns=(e["mt"], e["mt"]), follow_symlinks=False)
        cache = {"checkpoint": ckpt, "files": new_cache, "sig": _upper_signature(workdir)}
        (workdir / "fscache.json").write_text(json.dumps(cache))

    # -- commands

    def _enter_argv(self, h: VMHandle, req: ExecRequest, argv: list[str]) -> list[str]:
        env = {
            "PATH": GUEST_PATH_ENV,
            "HOME": "/root",
            "USER": "root",
            "LANG": "C.UTF-8",
            "HOSTNAME": "sandbox",
            **h.spec.env,
            **req.env,
        }
        cwd = normalize_guest_path(req.cwd or GUEST_HOME)
        return [
            str(self.nsenter), "-t", str(h.pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--",
            str(self.setpriv), "--bounding-set", f"-all,+{KEEP_CAPS.replace(',', ',+')}", "--",
            "/usr/bin/env", "-i", "-C", cwd, *(f"{k}={v}" for k, v in env.items()), *argv,
        ]  # fmt: skip

    def exec(self, h: VMHandle, req: ExecRequest) -> ExecResult:
        if req.background:
            return self._exec_background(h, req)
        started = time.perf_counter()
        out: dict[str, list[str]] = {"stdout": [], "stderr": []}
        result = ExecResult()
        for ev in self.exec_stream(h, req):
            if ev.kind in ("stdout", "stderr"):
                out[ev.kind].append(ev.data)
            elif ev.kind == "start":
                result.pid = ev.pid
            elif ev.kind == "exit":
                result.exit_code = ev.exit_code
                result.timed_out = ev.timed_out
                result.truncated = ev.truncated
        result.stdout = "".join(out["stdout"])
        result.stderr = "".join(out["stderr"])
        result.duration_ms = (time.perf_counter() - started) * 1000
        return result

    def _exec_background(self, h: VMHandle, req: ExecRequest) -> ExecResult:
        started = time.perf_counter()
        fg = req.model_copy(
            update={
                "argv": ["/bin/sh", "-c", BG_SCRIPT, "sh", *req.full_argv()],
                "cmd": None,
                "background": False,
                "timeout_s": 30,
            }
        )
        res = self.exec(h, fg)
        if res.exit_code != 0 or not res.stdout.strip().isdigit():
            raise GuestFileError(f"could not start background command: {res.stderr.strip()}")
        return ExecResult(
            pid=int(res.stdout.strip()), duration_ms=(time.perf_counter() - started) * 1000
        )

    def exec_stream(self, h: VMHandle, req: ExecRequest) -> Iterator[ExecEvent]:
        if req.background:
            res = self._exec_background(h, req)
            yield ExecEvent(kind="start", pid=res.pid)
            return
        self._check_alive(h)
        argv = self._enter_argv(h, req, req.full_argv())
        with self._gate(h.sandbox_id):  # not while a checkpoint has the sandbox frozen
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if req.stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            with self._lock:
                self._execs.setdefault(h.sandbox_id, set()).add(proc)
        try:
            yield ExecEvent(kind="start", pid=proc.pid)
            yield from self._feed_and_pump(proc, req)
        finally:
            with self._lock:
                self._execs.get(h.sandbox_id, set()).discard(proc)

    def _feed_and_pump(
        self, proc: subprocess.Popen[bytes], req: ExecRequest
    ) -> Iterator[ExecEvent]:
        if req.stdin:
            stdin = proc.stdin
            assert stdin is not None

            def feed() -> None:
                try:
                    stdin.write(req.stdin or b"")
                except OSError:
                    pass
                finally:
                    try:
                        stdin.close()
                    except OSError:
                        pass

            threading.Thread(target=feed, daemon=True).start()
        yield from self._pump(proc, req.timeout_s, req.max_output_bytes or MAX_OUTPUT_BYTES)

    def _pump(
        self, proc: subprocess.Popen[bytes], timeout_s: float, cap: int
    ) -> Iterator[ExecEvent]:
        deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
        sel = selectors.DefaultSelector()
        streams = {proc.stdout: "stdout", proc.stderr: "stderr"}
        decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in streams.values()
        }
        sizes = {"stdout": 0, "stderr": 0}
        for f in streams:
            assert f is not None
            os.set_blocking(f.fileno(), False)
            sel.register(f, selectors.EVENT_READ)
        timed_out = False
        exited_at: float | None = None
        try:
            while sel.get_map():
                now = time.monotonic()
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > DRAIN_AFTER_EXIT_S:
                    break  # a background child holds the pipe open; its output is not ours
                if deadline is not None and now > deadline and exited_at is None:
                    timed_out = True
                    self._kill_group(proc)
                    deadline = None
                wait = 0.05
                if deadline is not None:
                    wait = max(0.0, min(wait, deadline - now))
                for key, _ in sel.select(timeout=wait):
                    name = streams[key.fileobj]  # type: ignore[index]
                    try:
                        chunk = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    room = cap - sizes[name]
                    sizes[name] += len(chunk)
                    if room <= 0:
                        continue
                    text = decoders[name].decode(chunk[:room])
                    if text:
                        yield ExecEvent(kind=name, data=text)  # type: ignore[arg-type]
            for name, dec in decoders.items():
                tail = dec.decode(b"", final=True)
                if tail:
                    yield ExecEvent(kind=name, data=tail)  # type: ignore[arg-type]
            truncated = any(n > cap for n in sizes.values())
            rc = proc.wait()
        except GeneratorExit:
            self._kill_group(proc)
            raise
        finally:
            sel.close()
            for f in (proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
        if timed_out:
            yield ExecEvent(kind="exit", exit_code=None, timed_out=True, truncated=truncated)
        else:
            code = rc if rc >= 0 else 128 - rc
            yield ExecEvent(kind="exit", exit_code=code, truncated=truncated)

    @staticmethod
    def _kill_group(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal_mod.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def kill_process(self, h: VMHandle, pid: int, signal: int = 15) -> None:
        self._check_alive(h)
        if pid <= 1:
            raise GuestFileError(f"refusing to signal guest pid {pid}")
        script = f"kill -{int(signal)} -- -{int(pid)} 2>/dev/null; kill -{int(signal)} {int(pid)}"
        res = self.exec(h, ExecRequest(argv=["/bin/sh", "-c", script], cwd="/", timeout_s=10))
        if res.exit_code != 0:
            raise GuestFileNotFound(f"no guest process {pid}", errno_mod.ESRCH, str(pid))

    # -- files

    def _host(self, h: VMHandle, gpath: str, follow_last: bool = True) -> Path:
        """Host path of guest path ``gpath``; symlinks are resolved inside the guest root."""
        self._check_alive(h)
        mnt = Path(h.workdir) / "mnt"
        parts: deque[str] = deque(p for p in normalize_guest_path(gpath).split("/") if p)
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = [*resolved, part]
            host = self._map(mnt, candidate)
            if (parts or follow_last) and host.is_symlink():
                hops += 1
                if hops > 40:
                    raise GuestFileError(f"{gpath}: too many levels of symbolic links",
                                         errno_mod.ELOOP, gpath)  # fmt: skip
                target = os.readlink(host)
                if target.startswith("/"):
                    resolved = []
                parts.extendleft(reversed([p for p in target.split("/") if p]))
                continue
            resolved = candidate
        return self._map(mnt, resolved)

    @staticmethod
    def _map(mnt: Path, parts: list[str]) -> Path:
        if parts and parts[0] == "usr":
            return mnt.joinpath("usr", *parts[1:])
        return mnt.joinpath("root", *parts)

    @staticmethod
    def _info(gpath: str, host: Path) -> FileInfo:
        st = os.lstat(host)
        return FileInfo(
            path=gpath,
            name=gpath.rsplit("/", 1)[-1] or "/",
            size=st.st_size,
            mode=stat_mod.S_IMODE(st.st_mode),
            is_dir=stat_mod.S_ISDIR(st.st_mode),
            is_symlink=stat_mod.S_ISLNK(st.st_mode),
            mtime=st.st_mtime,
        )

    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        gpath = normalize_guest_path(path)
        host = self._host(h, gpath)
        try:
            if host.is_dir():
                raise GuestFileError(f"{gpath}: is a directory", errno_mod.EISDIR, gpath)
            with open(host, "rb") as fh:
                data = fh.read() if limit is None else fh.read(limit + 1)
            if limit is not None and len(data) > limit:
                raise GuestFileTooLarge(
                    f"{gpath} is larger than {limit} bytes", errno_mod.EFBIG, gpath
                )
            return data
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        gpath = normalize_guest_path(path)
        if gpath == "/":
            raise GuestPathError("cannot write to '/'")
        host = self._host(h, gpath)
        try:
            parent = self._host(h, gpath.rsplit("/", 1)[0] or "/")
            parent.mkdir(parents=True, exist_ok=True)
            if host.is_dir():
                raise GuestFileError(f"{gpath}: is a directory", errno_mod.EISDIR, gpath)
            fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(host, mode)
            return self._info(gpath, host)
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        gpath = normalize_guest_path(path)
        host = self._host(h, gpath)
        try:
            if not host.is_dir():
                if not host.exists():
                    raise FileNotFoundError(gpath)
                raise GuestFileError(f"{gpath}: not a directory", errno_mod.ENOTDIR, gpath)
            names = sorted(os.listdir(host))
            base = gpath.rstrip("/")
            return [self._info(f"{base}/{n}", host / n) for n in names if (host / n).exists()
                    or (host / n).is_symlink()]  # fmt: skip
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def stat(self, h: VMHandle, path: str) -> FileInfo:
        gpath = normalize_guest_path(path)
        try:
            return self._info(gpath, self._host(h, gpath, follow_last=False))
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        gpath = normalize_guest_path(path)
        if gpath in ("/", "/usr"):
            raise GuestPathError(f"refusing to remove {gpath!r}")
        host = self._host(h, gpath, follow_last=False)
        try:
            if host.is_dir() and not host.is_symlink():
                if recursive:
                    shutil.rmtree(host)
                else:
                    os.rmdir(host)
            else:
                os.unlink(host)
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def make_dir(self, h: VMHandle, path: str) -> FileInfo:
        gpath = normalize_guest_path(path)
        host = self._host(h, gpath)
        try:
            host.mkdir(parents=True, exist_ok=True)
            return self._info(gpath, host)
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def close(self) -> None:
        with self._lock:
            children = list(self._children.values())
        for proc in children:
            proc.poll()


def _signature(st: os.stat_result) -> list[int]:
    """Changes whenever the object or (for a directory) its entries change."""
    return [st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _upper_signature(workdir: Path) -> dict[str, list[int]]:
    return {
        f"{ov}/{rel}": _signature(st)
        for ov in OVERLAYS
        for rel, st in _walk_upper(workdir / "upper" / ov)
    }
