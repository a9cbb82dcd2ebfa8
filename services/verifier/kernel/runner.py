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
CPU time per thread from ``/proc/<pid>/task/*/schedstat`` (nanoseconds) and the process's total
from ``/proc/<pid>/stat`` (which keeps the time of threads that ended), and the process tree.
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


def _limits(address_space: int, file_size: int) -> Callable[[], None]:
    def apply() -> None:
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


def process_cpu(pid: int) -> int:
    """The process's user + system time, threads that ended included (clock ticks, in ns)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * TICK_NS
    except (OSError, ValueError, IndexError):
        return 0


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
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=fds,
            start_new_session=True,
            preexec_fn=_limits(address_space, file_size),  # noqa: PLW1509 - rlimits before exec
        )
        for fd in (cmd_r, rep_w, wire_w):
            os.close(fd)
        self.flooded = False
        self.drains = [_Drain(self.proc.stdout, self._flood, log_cap),
                       _Drain(self.proc.stderr, self._flood, log_cap)]  # fmt: skip
        for d in self.drains:
            d.start()
        self.buf = bytearray()
        self.wire: list[str] = []
        self.pid = 0  # the Python process's host pid, once ready
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
        for fd in (self.cmd_w, self.rep_r, self.wire_r, self.in_fd, self.out_fd):
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
        kids = [p for p in descendants(self.proc.pid) if _is_python(p)]
        self.pid = kids[-1] if kids else 0
        self.tree = descendants(self.proc.pid)
        return msg

    # -- accounting

    def cpu(self) -> dict[int, int]:
        return thread_cpu(self.pid) if self.pid else {}

    def total_cpu(self) -> int:
        return process_cpu(self.pid) if self.pid else 0


def _is_python(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"stub.py" in f.read()
    except OSError:
        return False
