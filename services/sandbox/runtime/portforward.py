"""Host-side TCP forwarders: a loopback port on the host that reaches a port inside a sandbox.

Used where the runtime has no forwarding of its own (the ``process`` runtime: the sandbox
lives in its own network namespace, so a guest server on ``127.0.0.1:8000`` is unreachable
from the host). Each accepted connection gets a socket opened *inside* the sandbox's network
namespace: a fresh thread enters the namespace (``setns``, which affects only the calling
thread), connects there, and the socket stays in that namespace after the thread is gone.
Then bytes are pumped both ways until either side closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
LOOPBACK = "127.0.0.1"


def _in_netns(
    netns_path: str, make: Callable[[], socket.socket], timeout_s: float
) -> socket.socket:
    """A socket made by ``make()`` on a thread inside the network namespace at ``netns_path``
    (e.g. ``/proc/<pid>/ns/net``); the socket stays in that namespace."""
    result: dict[str, object] = {}

    def enter_and_make() -> None:
        try:
            fd = os.open(netns_path, os.O_RDONLY)
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns_path}): {os.strerror(err)}")
            finally:
                os.close(fd)
            result["sock"] = make()
        except OSError as exc:
            result["error"] = exc

    t = threading.Thread(target=enter_and_make, name="k3stack-netns", daemon=True)
    t.start()
    t.join(timeout_s + 5)
    if "sock" in result:
        sock = result["sock"]
        assert isinstance(sock, socket.socket)
        sock.settimeout(None)
        return sock
    raise result.get("error") or OSError(f"socket in {netns_path} timed out")  # type: ignore[misc]


def connect_in_netns(netns_path: str, port: int, timeout_s: float = 10.0) -> socket.socket:
    """A TCP connection to ``127.0.0.1:port`` as seen inside the network namespace."""
    return _in_netns(
        netns_path, lambda: socket.create_connection((LOOPBACK, port), timeout=timeout_s), timeout_s
    )


def listen_in_netns(netns_path: str, address: tuple[str, int]) -> socket.socket:
    """A listening TCP socket on ``address`` inside the network namespace (the guest side of an
    egress forward: guest connections to it are accepted here, on the host)."""
    return _in_netns(netns_path, lambda: socket.create_server(address), 10.0)


class PortForwarder:
    """Listens on ``127.0.0.1:<free port>``; every connection is piped to ``connect()``.

    ``close()`` stops listening and ends the open connections."""

    def __init__(self, connect: Callable[[], socket.socket], name: str = "forward",
                 bind: tuple[str, int] = (LOOPBACK, 0),
                 listener: socket.socket | None = None) -> None:  # fmt: skip
        self._connect = connect
        self._listener = listener or socket.create_server(bind)
        self.host, self.port = self._listener.getsockname()[:2]
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"k3stack-{name}", daemon=True
        )
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = self._connect()
        except OSError as exc:
            log.info("port forward %s: guest side refused: %s", self.address, exc)
            client.close()
            return
        with self._lock:
            if self._closed.is_set():
                client.close()
                upstream.close()
                return
            self._conns.update((client, upstream))
        try:
            _pump(client, upstream)
        finally:
            with self._lock:
                self._conns.discard(client)
                self._conns.discard(upstream)
            client.close()
            upstream.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways; a half-close is passed on, both closed ends the pump."""
    sel = selectors.DefaultSelector()
    peer = {a: b, b: a}
    sel.register(a, selectors.EVENT_READ)
    sel.register(b, selectors.EVENT_READ)
    open_sides = 2
    try:
        while open_sides:
            for key, _ in sel.select():
                src = key.fileobj
                assert isinstance(src, socket.socket)
                try:
                    data = src.recv(65536)
                except OSError:
                    return
                if not data:
                    sel.unregister(src)
                    open_sides -= 1
                    with contextlib.suppress(OSError):
                        peer[src].shutdown(socket.SHUT_WR)
                    continue
                try:
                    peer[src].sendall(data)
                except OSError:
                    return
    finally:
        sel.close()


class NetnsForwards:
    """One :class:`PortForwarder` per (sandbox, port) into the network namespace of a
    sandbox's init process (host pid): E2B's ``get_host`` for runtimes whose guest network
    the host cannot reach (a ``docker`` container with network ``none``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forwards: dict[tuple[str, int], PortForwarder] = {}

    def expose(self, sandbox_id: str, init_pid: int, port: int) -> str:
        netns = f"/proc/{init_pid}/ns/net"
        with self._lock:
            fwd = self._forwards.get((sandbox_id, port))
            if fwd is None:
                fwd = PortForwarder(lambda: connect_in_netns(netns, port), f"fwd-{port}")
                self._forwards[(sandbox_id, port)] = fwd
        return fwd.address

    def close(self, sandbox_id: str | None = None) -> None:
        """The forwarders of ``sandbox_id`` (of every sandbox when None)."""
        with self._lock:
            mine = [k for k in self._forwards if sandbox_id in (None, k[0])]
            forwards = [self._forwards.pop(k) for k in mine]
        for fwd in forwards:
            fwd.close()
