"""Connecting to a unix socket that a process just started is about to create (QEMU's QMP and
agent sockets): tried again until it answers, by tenacity, within the caller's time."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")


def until_connected(connect: Callable[[], T], timeout_s: float, every_s: float = 0.005) -> T:
    """``connect()`` again every ``every_s`` while it raises ``OSError`` (the socket is not there
    yet, or not listening), for at most ``timeout_s``; then its last ``OSError``."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(OSError),
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(every_s),
        reraise=True,
    )(connect)


def connect_unix(path: str, timeout_s: float, every_s: float = 0.005) -> socket.socket:
    """A stream socket connected to ``path`` (see :func:`until_connected`)."""

    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock

    return until_connected(connect, timeout_s, every_s)
