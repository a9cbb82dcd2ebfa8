"""One implementation in a sandboxed process of its own, driven and watched from outside.

The sandbox is bubblewrap, the mechanism of the sandbox service's ``process`` runtime, set up
for timing: every namespace unshared (no network, its own PID namespace), a read-only root made
of the host's ``/usr``, ``/etc`` and Python install (the host torch; nothing of the project or
home directories), a private size-capped ``/tmp``, all capabilities dropped, rlimits on file
size and address space, killed with its parent. Why not a sandbox created through the sandbox
service: its process image shows the host's ``/usr`` only (this machine's Python and torch live
elsewhere), and the measurer needs shared memory and the process's CPU accounting, which an
exec API does not give.

What crosses into the process: two shared-memory files (memfd) — inputs the measurer writes,
outputs the process writes — a command pipe, a reply pipe and a tripwire pipe. What the
measurer reads about it comes from the kernel, not from the process: wall time on its own clock,
CPU time per thread of every process in the sandbox from ``/proc/<pid>/task/*/schedstat``
(nanoseconds), the measured process's total from ``/proc/<pid>/stat`` (which keeps the time of
threads that ended), the whole sandbox's from its cgroup (``cgroup.py``; else the process tree
under bubblewrap's init, with what each reaped), the pid bubblewrap reports for its child (on
``--info-fd``), and each process's command line and environment.
"""

from __future__ import annotations

import json
import mmap
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.verifier.kernel.cgroup import Group, make_group

LOG_KEEP = 16 * 1024
MAX_REPLY = 1 << 20
TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


class StubDied(Exception):
    """The process broke the protocol, died, flooded its output or ran out of time."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # timeout | flood | died | protocol | error:<stage>


class _Drain(threading.Thread):
    """Reads one output stream to the end, keeping its head; counts the bytes."""

    def __init__(self, stream: Any, on_flood: Callable[[], None], cap: int) -> None:
        super().__init__(daemon=True)
        self.stream, self.on_flood, self.cap = stream, on_flood, cap
        self.kept = bytearray()
        self.total = 0

    def run(self) -> None:
        while chunk := self.stream.read1(1 << 16):
            self.total += len(chunk)
            if len(self.kept) < LOG_KEEP:
                self.kept += chunk[: LOG_KEEP - len(self.kept)]
            if self.total > self.cap:
                self.on_flood()
                return


def _host_binds() -> list[str]:
    """Read-only binds that make the host's Python and its packages visible, nothing more."""
    args: list[str] = []
    for top in ("usr", "etc"):
        args += ["--ro-bind", f"/{top}", f"/{top}"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    seen: set[str] = set()
    for prefix in (sys.prefix, sys.base_prefix):
        real = os.path.realpath(prefix)
        for path in (real, prefix):
            if path not in seen and not path.startswith(("/usr/", "/etc/")):
                args += ["--ro-bind", real, path]
                seen.add(path)
    return args


def _gpu_binds(device: str) -> list[str]:
    """A CUDA run needs the NVIDIA device nodes inside the sandbox (nothing else of /dev)."""
    if not device.startswith("cuda"):
        return []
    nodes = sorted(str(p) for p in Path("/dev").glob("nvidia*"))
    return [arg for node in nodes for arg in ("--dev-bind", node, node)]


def available() -> tuple[bool, str]:
    if not shutil.which("bwrap"):
        return False, "bwrap not on PATH (apt-get install bubblewrap)"
    return True, "bubblewrap"


def _limits(address_space: int, file_size: int, group: Group | None) -> Callable[[], None]:
    def apply() -> None:
        if group is not None:
            group.join_self()
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def thread_cpu(pid: int) -> dict[int, int]:
    """Nanoseconds on a CPU per live thread of ``pid`` (the kernel's scheduler accounting)."""
    got: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return got
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                got[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # the thread ended between the listing and the read
    return got


def process_cpu(pid: int, *, reaped: bool = False) -> int:
    """The process's user + system time, threads that ended included (clock ticks, in ns);
    ``reaped`` adds the time of the children it has waited for."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        if reaped:
            ticks += int(fields[13]) + int(fields[14])
        return ticks * TICK_NS
    except (OSError, ValueError, IndexError):
        return 0


def inner_pid(pid: int) -> int | None:
    """The pid of ``pid`` in its own (innermost) pid namespace."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def resident_bytes(pid: int) -> int:
    """Anonymous resident memory (the shared-memory pages the measurer maps in do not count)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Stub:
    """One sandboxed implementation process (``stub.py``) and its shared memory."""

    def __init__(
        self,
        staging: Path,
        job: dict[str, Any],
        *,
        name: str,
        in_bytes: int,
        out_bytes: int,
        threads: int = 1,
        log_cap: int = 8 << 20,
        address_space: int = 24 << 30,
        file_size: int = 64 << 20,
        tmp_bytes: int = 256 << 20,
    ) -> None:
        self.name = name
        self.group = make_group(name)
        self.info_r, info_w = os.pipe()
        (staging / f"{name}.json").write_text(json.dumps(job))
        (staging / f"{name}.json").chmod(0o444)
        self.in_fd, self.out_fd = os.memfd_create(f"k3s-{name}-in"), os.memfd_create("k3s-out")
        os.ftruncate(self.in_fd, max(in_bytes, 4096))
        os.ftruncate(self.out_fd, max(out_bytes, 4096))
        self.inp = mmap.mmap(self.in_fd, max(in_bytes, 4096))
        self.out = mmap.mmap(self.out_fd, max(out_bytes, 4096))
        cmd_r, self.cmd_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        self.wire_r, wire_w = os.pipe()
        os.set_blocking(self.wire_r, False)
        fds = (cmd_r, rep_w, self.in_fd, self.out_fd, wire_w)
        for fd in fds:
            os.set_inheritable(fd, True)
        argv = [
            shutil.which("bwrap") or "bwrap",
            "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            # the launcher reports its child (the sandbox's init): the measured process is
            # that init's first child, never one found by name
            "--info-fd", str(info_w),
            # The private /tmp first: the host binds then land on top of it, so a checkout (and
            # its virtualenv) that lives under /tmp stays visible inside the sandbox.
            "--size", str(tmp_bytes), "--tmpfs", "/tmp",
            *_host_binds(),
            "--proc", "/proc", "--dev", "/dev", *_gpu_binds(job.get("device", "cpu")),
            "--ro-bind", str(staging), "/k3s",
            "--chdir", "/tmp", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
            "--setenv", "OMP_NUM_THREADS", str(threads), "--setenv", "MKL_NUM_THREADS", str(threads),
            "--setenv", "OMP_WAIT_POLICY", "PASSIVE",
            # a fixed mmap threshold: freed large blocks go back to the kernel, so resident
            # memory follows live memory and a cache that keeps outputs shows
            "--setenv", "MALLOC_MMAP_THRESHOLD_", "262144",
            "--",
            os.path.join(sys.prefix, "bin", "python"), "-I", "/k3s/stub.py",
            *(str(fd) for fd in fds), f"/k3s/{name}.json",
        ]  # fmt: skip
        command = argv[argv.index("--") + 1 :]
        env = {
            f"{argv[i + 1]}={argv[i + 2]}".encode() for i, a in enumerate(argv) if a == "--setenv"
        }
        env.add(b"PWD=/tmp")  # bubblewrap's own, from --chdir
        self.image = (b"\0".join(a.encode() for a in command) + b"\0", env)
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(*fds, info_w),
            start_new_session=True,
            # rlimits and the cgroup before exec
            preexec_fn=_limits(address_space, file_size, self.group),  # noqa: PLW1509
        )
        for fd in (cmd_r, rep_w, wire_w, info_w):
            os.close(fd)
        if self.group is not None and self.proc.pid not in self.group.pids():
            self.group.close()  # the launcher did not land in it: account by process tree
            self.group = None
        self.flooded = False
        self.drains = [_Drain(self.proc.stdout, self._flood, log_cap),
                       _Drain(self.proc.stderr, self._flood, log_cap)]  # fmt: skip
        for d in self.drains:
            d.start()
        self.buf = bytearray()
        self.wire: list[str] = []
        self.pid = 0  # the Python process's host pid, once ready
        self.init = 0  # the sandbox's init (the launcher's child), once ready
        self.tree: list[int] = []

    # -- lifecycle

    def _flood(self) -> None:
        self.flooded = True
        self.kill()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        self.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for d in self.drains:
            d.join(timeout=10)
        self.read_wire()
        if self.group is not None:
            self.group.close()
        for fd in (self.cmd_w, self.rep_r, self.wire_r, self.info_r, self.in_fd, self.out_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.inp.close()
        self.out.close()

    @property
    def stderr(self) -> str:
        return self.drains[1].kept.decode(errors="replace")[-LOG_KEEP:]

    @property
    def stdout(self) -> str:
        return self.drains[0].kept.decode(errors="replace")

    @property
    def output_bytes(self) -> int:
        return self.drains[0].total + self.drains[1].total

    # -- protocol

    def read_wire(self) -> list[str]:
        try:
            while chunk := os.read(self.wire_r, 1 << 16):
                self.wire += chunk.decode(errors="replace").splitlines()
        except (BlockingIOError, OSError):
            pass
        return self.wire

    def receive(self, deadline: float) -> dict[str, Any]:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StubDied("timeout", f"{self.name}: no answer in time (killed)")
            ready, _, _ = select.select([self.rep_r], [], [], min(left, 0.5))
            if self.flooded:
                raise StubDied("flood", f"{self.name}: output flood")
            if not ready:
                continue
            chunk = os.read(self.rep_r, 1 << 16)
            if not chunk:
                code = self.proc.poll()
                raise StubDied("died", f"{self.name}: the process died (exit code {code})")
            self.buf += chunk
            if len(self.buf) > MAX_REPLY:
                raise StubDied("protocol", f"{self.name}: a reply over {MAX_REPLY} bytes")
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        try:
            msg = json.loads(line)
        except ValueError as exc:
            raise StubDied("protocol", f"{self.name}: unreadable reply ({exc})") from None
        if not isinstance(msg, dict):
            raise StubDied("protocol", f"{self.name}: a reply that is not an object")
        if msg.get("type") == "error":
            raise StubDied(f"error:{msg.get('stage')}", str(msg.get("message", ""))[-3000:])
        return msg

    def send(self, msg: dict[str, Any]) -> None:
        try:
            os.write(self.cmd_w, (json.dumps(msg) + "\n").encode())
        except OSError as exc:
            raise StubDied("died", f"{self.name}: command pipe closed ({exc})") from None

    def ask(self, msg: dict[str, Any], deadline: float) -> dict[str, Any]:
        self.send(msg)
        return self.receive(deadline)

    def ready(self, deadline: float) -> dict[str, Any]:
        msg = self.receive(deadline)
        self.init = self._launched_child() or next(iter(_children(self.proc.pid)), 0)
        # the command the init started is pid 2 of the sandbox's pid namespace; anything else
        # under the init (a forked child, an orphaned helper) is not the candidate
        kids = _children(self.init)
        self.pid = next((p for p in kids if inner_pid(p) == 2), 0)
        self.tree = descendants(self.proc.pid)
        return msg

    def _launched_child(self) -> int:
        """The child pid bubblewrap reported on its info pipe (written before the command runs)."""
        os.set_blocking(self.info_r, False)
        raw = b""
        try:
            while chunk := os.read(self.info_r, 4096):
                raw += chunk
        except (BlockingIOError, OSError):
            pass
        try:
            return int(json.loads(raw)["child-pid"])
        except (ValueError, KeyError, TypeError):
            return 0

    def replaced(self) -> str:
        """Why the measured process is no longer the program that was started (it exec'd
        something else: another command line or environment in the same pid), or ""."""
        if not self.pid:
            return ""
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{self.pid}/environ", "rb") as f:
                environ = {e for e in f.read().split(b"\0") if e}
        except OSError:
            return ""  # gone: the next call finds out
        if cmdline != self.image[0]:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
            return f"it runs {shown!r}, not the stub it was started as"
        extra = sorted(e.decode(errors="replace")[:60] for e in environ - self.image[1])
        if extra:  # (one the launcher did not set, say LD_PRELOAD, or a changed value)
            return f"its environment changed: {extra[:5]}"
        return ""

    # -- accounting

    def processes(self) -> list[int]:
        """Every process in the sandbox but the launcher's two (bwrap and its init)."""
        if self.group is not None:
            found = self.group.pids()
        else:
            found = [self.init, *descendants(self.init)] if self.init else []
        return [p for p in found if p not in (self.proc.pid, self.init)]

    def extra_processes(self) -> dict[int, str]:
        """Processes in the sandbox other than the measured one: pid -> command line."""
        return {p: command_line(p) for p in self.processes() if p != self.pid}

    def cpu(self) -> dict[int, int]:
        """Nanoseconds per live thread of every process in the sandbox (the measured one's and
        any other's: a helper's threads are side threads, charged and seen)."""
        got: dict[int, int] = {}
        for pid in self.processes() if self.pid else []:
            got.update(thread_cpu(pid))
        return got

    def sandbox_cpu(self) -> int:
        """CPU of everything that ever ran in the sandbox, ended processes and threads included
        (the cgroup's count; else the tree's ticks with what each reaped)."""
        if self.group is not None:
            return self.group.usage_ns()
        if not self.init:
            return 0
        return sum(process_cpu(p, reaped=True) for p in [self.init, *descendants(self.init)])

    def total_cpu(self) -> int:
        return process_cpu(self.pid) if self.pid else 0
