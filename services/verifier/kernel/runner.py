"""Runs the trusted harness and the untrusted candidate in a namespace sandbox, and talks to it.

The sandbox is bubblewrap, the mechanism of the sandbox service's ``process`` runtime, set up
for timing: every namespace unshared (no network), a read-only root made of the host's
``/usr``, ``/etc`` and Python install (so the host torch is there; nothing of the project or
home directories), a private size-capped ``/tmp``, all capabilities dropped, rlimits on file
size and address space, killed with its parent. Why not a sandbox created through the sandbox
service: its process image shows the host's ``/usr`` only (this machine's Python and torch live
elsewhere), and its exec API has no live channel, which the late seeds and the streamed outputs
need. The run is bounded: a wall-clock deadline, a cap on stdout/stderr (a candidate that prints
gigabytes is killed), a cap on every frame; whatever happens, this function returns.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_HEADER = 1 << 20
LOG_KEEP = 16 * 1024


@dataclass
class Frame:
    header: dict[str, Any]
    payload: bytes
    at_ns: int  # the verifier's own clock when the frame arrived


@dataclass
class RunOutcome:
    frames: list[Frame] = field(default_factory=list)
    exit_code: int | None = None
    timed_out: bool = False
    flooded: bool = False
    protocol_error: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    output_bytes: int = 0
    wall_s: float = 0.0


class _Drain(threading.Thread):
    """Reads one output stream to the end, keeping its head; counts the bytes."""

    def __init__(self, stream: Any, on_flood: Callable[[], None], cap: int) -> None:
        super().__init__(daemon=True)
        self.stream, self.on_flood, self.cap = stream, on_flood, cap
        self.kept = bytearray()
        self.total = 0

    def run(self) -> None:
        while (
            chunk := self.stream.read1(1 << 16)
            if hasattr(self.stream, "read1")
            else self.stream.read(1 << 16)
        ):
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


def sandbox_python() -> str:
    return os.path.join(sys.prefix, "bin", "python")


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


def run_sandboxed(
    staging: Path,
    job_file: str,
    answer: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    timeout_s: float,
    max_payload: int,
    log_cap: int = 8 << 20,
    threads: int = 1,
    address_space: int = 24 << 30,
    file_size: int = 64 << 20,
    tmp_bytes: int = 256 << 20,
) -> RunOutcome:
    """Run ``/k3s/harness.py`` (``staging`` mounted read-only at ``/k3s``); ``answer`` replies to
    each ``ask`` frame. Returns when the harness exits, breaks the protocol, floods its output or
    passes ``timeout_s``; the sandbox is dead by then."""
    outcome = RunOutcome()
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe()
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        # The private /tmp first: the host binds then land on top of it, so a checkout (and its
        # virtualenv) that lives under /tmp stays visible inside the sandbox.
        "--size", str(tmp_bytes), "--tmpfs", "/tmp",
        *_host_binds(),
        "--proc", "/proc", "--dev", "/dev",
        "--ro-bind", str(staging), "/k3s",
        "--chdir", "/tmp", "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
        "--setenv", "OMP_NUM_THREADS", str(threads), "--setenv", "MKL_NUM_THREADS", str(threads),
        "--",
        sandbox_python(), "-I", "/k3s/harness.py", str(out_w), str(in_r), job_file,
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(out_w, in_r),
        start_new_session=True,
        preexec_fn=_limits(address_space, file_size),  # noqa: PLW1509 - rlimits before exec
    )
    os.close(out_w)
    os.close(in_r)

    def kill() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def flood() -> None:
        outcome.flooded = True
        kill()

    drains = [_Drain(proc.stdout, flood, log_cap), _Drain(proc.stderr, flood, log_cap)]
    for d in drains:
        d.start()
    deadline = start + timeout_s
    buf = bytearray()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                outcome.timed_out = True
                break
            ready, _, _ = select.select([out_r], [], [], min(left, 0.5))
            if not ready:
                if outcome.flooded:
                    break
                continue
            chunk = os.read(out_r, 1 << 20)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 4:
                (hlen,) = struct.unpack(">I", buf[:4])
                if hlen > MAX_HEADER:
                    raise _Protocol(f"frame header of {hlen} bytes")
                if len(buf) < 4 + hlen:
                    break
                try:
                    header = json.loads(buf[4 : 4 + hlen])
                    nbytes = int(header.get("nbytes", 0))
                except (ValueError, TypeError, AttributeError) as exc:
                    raise _Protocol(f"unreadable frame header: {exc}") from None
                if not isinstance(header, dict) or nbytes < 0 or nbytes > max_payload:
                    raise _Protocol(f"frame payload of {nbytes} bytes (at most {max_payload})")
                if len(buf) < 4 + hlen + nbytes:
                    break
                payload = bytes(buf[4 + hlen : 4 + hlen + nbytes])
                del buf[: 4 + hlen + nbytes]
                frame = Frame(header, payload, time.monotonic_ns())
                outcome.frames.append(frame)
                if header.get("type") == "ask":
                    os.write(in_w, (json.dumps(answer(header)) + "\n").encode())
    except _Protocol as exc:
        outcome.protocol_error = str(exc)
    except (BrokenPipeError, OSError) as exc:
        outcome.protocol_error = outcome.protocol_error or f"pipe closed: {exc}"
    finally:
        kill()
        os.close(out_r)
        os.close(in_w)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for d in drains:
            d.join(timeout=10)
    outcome.exit_code = proc.returncode
    outcome.stdout_tail = drains[0].kept.decode(errors="replace")
    outcome.stderr_tail = drains[1].kept.decode(errors="replace")[-LOG_KEEP:]
    outcome.output_bytes = drains[0].total + drains[1].total
    outcome.wall_s = time.monotonic() - start
    return outcome


class _Protocol(Exception):
    pass
