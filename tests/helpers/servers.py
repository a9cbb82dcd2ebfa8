"""Start real servers for tests on free loopback ports, and stop them reliably.

Each helper is a context manager that yields a :class:`ServerProcess` (``.url``, ``.port``,
``.proc``) and on exit kills the server's whole process group, so nothing outlives a test::

    from tests.helpers.servers import moto_server, redis_server

    @pytest.fixture(scope="session")
    def s3_url():
        with moto_server() as server:      # S3 API (moto) at server.url = http://127.0.0.1:P
            yield server.url

    with redis_server() as redis:           # a private redis-server at redis://127.0.0.1:P
        ...

    with spawn([sys.executable, "-m", "celery", ...], env=env, ready_text="ready.") as proc:
        ...                                 # any process, stopped with its children

Servers bind 127.0.0.1 only. Tests install nothing: a missing ``redis-server`` binary fails the
test that asked for it (``make test`` installs Debian's ``redis-server``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the OS picks it; another process may take it
    before you bind it, which is why the starters below retry on a fresh port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(
    port: int,
    host: str = LOOPBACK,
    timeout: float = 15.0,
    proc: subprocess.Popen | None = None,
) -> None:
    """Block until ``host:port`` accepts TCP connections.

    Raises :class:`TimeoutError` after ``timeout`` seconds, or :class:`RuntimeError` at once if
    ``proc`` (the server that should listen there) exits first.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"process {proc.args!r} exited with {proc.returncode} before port {port} opened"
            )
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listening on {host}:{port} after {timeout:.0f} s")
        time.sleep(0.05)


@dataclass
class ServerProcess:
    """A running server (or any process) started in its own process group."""

    proc: subprocess.Popen
    port: int = 0
    url: str = ""
    log_path: Path | None = None
    workdir: Path | None = None
    _tmp: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @property
    def pgid(self) -> int:
        return self.proc.pid  # start_new_session=True makes the child its group's leader

    def log(self) -> str:
        """What the process wrote to stdout/stderr so far."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def group_alive(self) -> bool:
        """Whether any process of the group still exists (zombies of ours are reaped first)."""
        self.proc.poll()
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the whole group, SIGKILL what is left after ``timeout``; wait for the leader."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=0.05)
                if not self.group_alive():
                    break
            if not self.group_alive():
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
    log_path: Path,
) -> subprocess.Popen:
    log = open(log_path, "ab")  # noqa: SIM115 - the child keeps it; ours is closed below
    try:
        return subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()


@contextlib.contextmanager
def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    port: int | None = None,
    ready_text: str | None = None,
    timeout: float = 30.0,
    url: str = "",
) -> Iterator[ServerProcess]:
    """Run ``argv`` in its own process group, wait until it is ready, stop it on exit.

    Ready means ``port`` accepts connections and/or ``ready_text`` appeared in its output
    (stdout and stderr go to ``server.log_path``; ``server.log()`` reads them, and a start-up
    failure's message includes them). On exit the group is stopped and must be gone.
    """
    tmp = tempfile.TemporaryDirectory(prefix="k3stack-proc-")
    log_path = Path(tmp.name) / "output.log"
    proc = _start(argv, env=env, cwd=cwd, log_path=log_path)
    server = ServerProcess(proc, port or 0, url, log_path, Path(tmp.name), tmp)
    try:
        deadline = time.monotonic() + timeout
        if port:
            wait_for_port(port, timeout=timeout, proc=proc)
        if ready_text:
            while ready_text not in server.log():
                if proc.poll() is not None:
                    raise RuntimeError(f"exited with {proc.returncode} before {ready_text!r}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{ready_text!r} not seen after {timeout:.0f} s")
                time.sleep(0.05)
    except (RuntimeError, TimeoutError) as exc:
        output = server.log()[-4000:]
        server.stop()
        raise RuntimeError(f"{' '.join(map(str, argv))}: {exc}\n--- output ---\n{output}") from None
    try:
        yield server
    finally:
        log_text = server.log()
        server.stop()
        assert not server.group_alive(), (
            f"processes of {argv[0]} survived stop()\n{log_text[-2000:]}"
        )


@contextlib.contextmanager
def _on_free_port(
    make_argv: Callable[[int], list[str]], *, url_template: str, attempts: int = 3, **kwargs: Any
) -> Iterator[ServerProcess]:
    """spawn() on a free port, retrying on a new one if another process took it first."""
    last: Exception | None = None
    for _ in range(attempts):
        port = free_port()
        stack = contextlib.ExitStack()
        try:
            argv = make_argv(port)
            server = stack.enter_context(
                spawn(argv, port=port, url=url_template.format(port=port), **kwargs)
            )
        except RuntimeError as exc:  # most likely: the port was taken in the meantime
            last = exc
            continue
        with stack:
            yield server
        return
    raise RuntimeError(f"could not start a server after {attempts} attempts: {last}")


def moto_server(timeout: float = 30.0) -> contextlib.AbstractContextManager[ServerProcess]:
    """A moto S3 server (``moto[server]``) in its own process; ``server.url`` is its endpoint.

    Any access key / secret works against it; state lives in its memory and dies with it.
    """
    return _on_free_port(
        lambda port: [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)],
        url_template=f"http://{LOOPBACK}:{{port}}",
        timeout=timeout,
    )


def redis_server_path() -> str | None:
    """Path of the ``redis-server`` binary, or None when it is not installed."""
    found = shutil.which("redis-server")
    if found:
        return found
    return "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None


@contextlib.contextmanager
def redis_server(timeout: float = 15.0) -> Iterator[ServerProcess]:
    """A private ``redis-server`` (no persistence, loopback only); ``server.url`` is
    ``redis://127.0.0.1:P``. Skips the calling test when the binary is missing."""
    binary = redis_server_path()
    if binary is None:
        pytest.fail("redis-server is not installed (`make test` installs Debian's redis-server)")
    with tempfile.TemporaryDirectory(prefix="k3stack-redis-") as workdir:
        with _on_free_port(
            lambda port: [
                binary,
                "--port",
                str(port),
                "--bind",
                LOOPBACK,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                "--daemonize",
                "no",
            ],
            url_template=f"redis://{LOOPBACK}:{{port}}",
            cwd=workdir,
            timeout=timeout,
        ) as server:
            yield server
