"""Calls into a running sandbox: exec (whole or streamed), process signals, port forwards and
files. They are not serialised with lifecycle operations (the runtime handles concurrent use);
they only check the sandbox is running first, say so clearly if it stops mid-way, and restart
its idle timeout. Exec time and output are bounded by the settings; paths are checked here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from services.sandbox.lifecycle.errors import Invalid, runtime_errors
from services.sandbox.lifecycle.state import Live, SandboxState
from services.sandbox.lifecycle.views import entry
from services.sandbox.models import SandboxRow
from services.sandbox.runtime.base import (
    ExecRequest,
    GuestPathError,
    SandboxNotRunning,
    SandboxRuntimeError,
    normalize_guest_path,
)
from shared.contracts.sandbox import (
    EntryInfo,
    ExecBody,
    ExecOutput,
    ExecStreamEvent,
    PortForward,
    SandboxMetric,
)

METRICS_SCRIPT = (
    "head -1 /proc/stat; sleep 0.2; head -1 /proc/stat; "
    "grep -E '^(MemTotal|MemAvailable|Cached):' /proc/meminfo; "
    "stat -f -c '%S %b %f' /; grep -c ^processor /proc/cpuinfo"
)


def parse_metrics(out: str) -> SandboxMetric:
    """The :data:`METRICS_SCRIPT` output as E2B's metric."""
    lines = out.splitlines()
    a, b = ([int(x) for x in line.split()[1:]] for line in lines[:2])
    busy = [y - x for x, y in zip(a, b, strict=False)]
    total = sum(busy) or 1
    idle = busy[3] + (busy[4] if len(busy) > 4 else 0)
    mem = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in lines[2:5]}
    block, blocks, free = (int(x) for x in lines[5].split())  # stat -f: busybox df skips rootfs
    now = datetime.now(UTC)
    return SandboxMetric(
        timestamp=now, timestampUnix=int(now.timestamp()), cpuCount=int(lines[6]),
        cpuUsedPct=round(100.0 * (total - idle) / total, 2),
        memTotal=mem["MemTotal"], memUsed=mem["MemTotal"] - mem["MemAvailable"],
        memCache=mem.get("Cached", 0), diskUsed=(blocks - free) * block,
        diskTotal=blocks * block,
    )  # fmt: skip


def guest_path(path: str) -> str:
    try:
        return normalize_guest_path(path)
    except GuestPathError as exc:
        raise Invalid("invalid_path", str(exc)) from exc


class GuestOps:
    """Exec, signals, ports and files of running sandboxes."""

    def __init__(self, state: SandboxState) -> None:
        self.st = state

    @contextmanager
    def _op(self, sandbox_id: str) -> Iterator[Live]:
        """The sandbox must be running; if it stops mid-way, say so."""
        live = self.st.require_running(sandbox_id)
        try:
            with runtime_errors(sandbox_id):
                try:
                    yield live
                except SandboxNotRunning:
                    self.st.require_running(sandbox_id)  # paused meanwhile: a clear 409
                    raise
        finally:
            self.st.touch(sandbox_id)

    # ------------------------------------------------------------------ exec

    def exec_request(self, body: ExecBody) -> ExecRequest:
        """The runtime's request: time and output bounded by the settings (0 = the maximum)."""
        settings = self.st.settings
        limit = settings.exec_max_timeout_s
        timeout = body.timeout_s if "timeout_s" in body.model_fields_set else min(60, limit)
        if timeout > limit:
            raise Invalid("invalid_request",
                f"timeout_s {timeout:g} is above the limit of {limit} s "
                "(K3STACK_SANDBOX__EXEC_MAX_TIMEOUT_S); 0 means the limit",
            )  # fmt: skip
        try:
            return ExecRequest(
                argv=body.argv, cmd=body.cmd, env=body.env,
                cwd=normalize_guest_path(body.cwd) if body.cwd else None,
                stdin=body.stdin.encode() if body.stdin is not None else None,
                timeout_s=timeout or limit, background=body.background,
                max_output_bytes=settings.exec_max_output_bytes,
            )  # fmt: skip
        except GuestPathError as exc:
            raise Invalid("invalid_path", str(exc)) from exc
        except ValueError as exc:
            raise Invalid("invalid_request", str(exc).split("\n", 1)[-1].strip()) from exc

    @staticmethod
    def _with_env(req: ExecRequest, live: Live) -> ExecRequest:
        """The sandbox's ``envs`` (from create) under the command's own: done here, so every
        runtime honours them the same way."""
        env = {**live.handle.spec.env, **req.env}
        return req if env == req.env else req.model_copy(update={"env": env})

    def exec(self, sandbox_id: str, body: ExecBody) -> ExecOutput:
        req = self.exec_request(body)
        with self._op(sandbox_id) as live:
            res = live.runtime.exec(live.handle, self._with_env(req, live))
        return ExecOutput(
            exit_code=res.exit_code, stdout=res.stdout, stderr=res.stderr,
            timed_out=res.timed_out, truncated=res.truncated, pid=res.pid,
            duration_ms=res.duration_ms,
        )  # fmt: skip

    def exec_stream(self, sandbox_id: str, body: ExecBody) -> Iterator[ExecStreamEvent]:
        """Checks happen now (errors raise before any byte is sent); events come lazily.

        If the sandbox goes away mid-command (paused, killed, crashed) the stream ends with an
        ``error`` event saying so instead of an ``exit``.
        """
        st = self.st
        req = self.exec_request(body)
        live = st.require_running(sandbox_id)
        events = live.runtime.exec_stream(live.handle, self._with_env(req, live))

        def gen() -> Iterator[ExecStreamEvent]:
            try:
                for ev in events:
                    yield ExecStreamEvent(**ev.model_dump())
            except SandboxRuntimeError as exc:
                state = "gone"
                with st.db.session() as s:
                    row = s.get(SandboxRow, sandbox_id)
                    if row is not None:
                        state = row.state
                yield ExecStreamEvent(kind="error", data=f"sandbox {sandbox_id} is {state}: {exc}")
            finally:
                st.touch(sandbox_id)

        return gen()

    def metrics(self, sandbox_id: str) -> SandboxMetric:
        """One sample of CPU (over 0.2 s), memory and root disk, read in the guest."""
        req = ExecRequest(argv=["/bin/sh", "-c", METRICS_SCRIPT], cwd="/", timeout_s=30)
        with self._op(sandbox_id) as live:
            res = live.runtime.exec(live.handle, req)
        try:
            return parse_metrics(res.stdout)
        except (ValueError, IndexError) as exc:
            raise Invalid("metrics_unavailable",
                          f"the guest's /proc or df gave no metrics: {res.stderr[:200]}") from exc  # fmt: skip

    def expose_port(self, sandbox_id: str, port: int) -> PortForward:
        with self._op(sandbox_id) as live:
            return PortForward(port=port, host=live.runtime.expose_port(live.handle, port))

    def kill_process(self, sandbox_id: str, pid: int, signal: int) -> None:
        with self._op(sandbox_id) as live:
            live.runtime.kill_process(live.handle, pid, signal)

    # ------------------------------------------------------------------ files

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        """Contents of a guest file, at most ``max_upload_bytes`` (413 past it)."""
        p = guest_path(path)
        with self._op(sandbox_id) as live:
            return live.runtime.read_file(live.handle, p, self.st.settings.max_upload_bytes)

    def read_file_stream(self, sandbox_id: str, path: str) -> Iterator[bytes]:
        """The file in chunks (constant memory); the first chunk is read now, so a missing
        file or a directory raises here, before any byte is sent. 413 mid-way past
        ``max_upload_bytes``."""
        p = guest_path(path)
        limit = self.st.settings.max_upload_bytes
        with self._op(sandbox_id) as live:
            chunks = live.runtime.read_file_stream(live.handle, p, limit)
            first = next(chunks, b"")

        def gen() -> Iterator[bytes]:
            with self._op(sandbox_id):
                if first:
                    yield first
                yield from chunks

        return gen()

    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int) -> EntryInfo:
        p = guest_path(path)
        with self._op(sandbox_id) as live:
            return entry(live.runtime.write_file(live.handle, p, data, mode))

    def write_file_stream(
        self, sandbox_id: str, path: str, chunks: Iterable[bytes], mode: int
    ) -> EntryInfo:
        """Write a guest file from chunks as they arrive (an upload is never held whole)."""
        p = guest_path(path)
        with self._op(sandbox_id) as live:
            return entry(live.runtime.write_file_stream(live.handle, p, chunks, mode))

    def list_dir(self, sandbox_id: str, path: str) -> list[EntryInfo]:
        p = guest_path(path)
        with self._op(sandbox_id) as live:
            return [entry(i) for i in live.runtime.list_dir(live.handle, p)]

    def stat(self, sandbox_id: str, path: str) -> EntryInfo:
        p = guest_path(path)
        with self._op(sandbox_id) as live:
            return entry(live.runtime.stat(live.handle, p))

    def remove(self, sandbox_id: str, path: str, recursive: bool) -> None:
        p = guest_path(path)
        with self._op(sandbox_id) as live:
            live.runtime.remove(live.handle, p, recursive)

    def make_dir(self, sandbox_id: str, path: str) -> EntryInfo:
        p = guest_path(path)
        with self._op(sandbox_id) as live:
            return entry(live.runtime.make_dir(live.handle, p))
