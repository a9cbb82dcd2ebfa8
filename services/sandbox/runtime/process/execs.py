"""Commands in a process sandbox: each exec enters the sandbox's namespaces with ``nsenter`` (its
user namespace too: the command's host uid is the guest's unprivileged uid, root only inside),
under ``no_new_privs`` and the seccomp filter of :mod:`~.confine`, with no capability left;
output is streamed, capped and timed out here.

A mixin of :class:`~services.sandbox.runtime.process.runtime.ProcessRuntime`; it uses the
runtime's ``root``, ``images_dir``, tools (``bwrap``, ``nsenter``, ``setpriv``) and ``_lock``.
"""

from __future__ import annotations

import codecs
import errno as errno_mod
import os
import selectors
import signal as signal_mod
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

from services.sandbox.runtime.base import (
    GUEST_HOME,
    ExecEvent,
    ExecRequest,
    ExecResult,
    GuestFileError,
    GuestFileNotFound,
    Runtime,
    VMHandle,
    normalize_guest_path,
)
from services.sandbox.runtime.process.cgroups import CommandCgroups

MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""Per stream, per foreground exec: output past this is dropped and the result says so."""
DRAIN_AFTER_EXIT_S = 0.05
"""After the command exits, how long to keep reading output its background children may hold."""

GUEST_PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

BG_SCRIPT = (
    "mkdir -p /tmp/.k3s && setsid /bin/sh -c 'exec >/tmp/.k3s/bg-$$.out 2>/tmp/.k3s/bg-$$.err "
    '</dev/null; exec "$@"\' sh "$@" & echo $!'
)
"""Starts ``"$@"`` in its own session with output to ``/tmp/.k3s/bg-<pid>.*``; prints its pid."""


class ExecMixin(Runtime):
    """exec, exec_stream, background commands and signals."""

    _cgroups: CommandCgroups
    _confiner: Callable[[], None]

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
            str(self.nsenter), "-t", str(h.pid), "-U", "-m", "-u", "-i", "-n", "-p", "-r", "-w",
            "--", str(self.setpriv), "--bounding-set", "-all", "--inh-caps", "-all",
            "--ambient-caps", "-all", "--no-new-privs", "--",
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
        cg = self._cgroups.command(h.sandbox_id)  # its own pids.max under the sandbox's
        argv = self._cgroups.enter_argv(cg, self._enter_argv(h, req, req.full_argv()))
        with self._gate(h.sandbox_id):  # not while a checkpoint has the sandbox frozen
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if req.stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=self._confiner,  # no groups, no_new_privs, seccomp: before nsenter
            )
            with self._lock:
                self._execs.setdefault(h.sandbox_id, set()).add(proc)
        try:
            yield ExecEvent(kind="start", pid=proc.pid)
            yield from self._feed_and_pump(proc, req)
        finally:
            with self._lock:
                self._execs.get(h.sandbox_id, set()).discard(proc)
            self._cgroups.release(cg)

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
        with self._lock:  # a streamed exec's pid is its host process group (nsenter's)
            own = any(p.pid == pid for p in self._execs.get(h.sandbox_id, ()))
        if own:
            try:
                os.killpg(pid, int(signal))
            except (ProcessLookupError, PermissionError) as exc:
                raise GuestFileNotFound(
                    f"no guest process {pid}", errno_mod.ESRCH, str(pid)
                ) from exc
            return
        script = f"kill -{int(signal)} -- -{int(pid)} 2>/dev/null; kill -{int(signal)} {int(pid)}"
        res = self.exec(h, ExecRequest(argv=["/bin/sh", "-c", script], cwd="/", timeout_s=10))
        if res.exit_code != 0:
            raise GuestFileNotFound(f"no guest process {pid}", errno_mod.ESRCH, str(pid))
