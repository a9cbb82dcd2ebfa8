"""A small synchronous QMP client (QEMU Machine Protocol over a unix socket)."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

from services.sandbox.runtime.sockets import connect_unix


class QMPError(RuntimeError):
    """QEMU answered a command with an error (``class`` and ``desc`` in the message)."""


class QMPClient:
    """One QMP connection. ``execute`` is serialised; asynchronous events are recorded in
    ``events`` (name, data) and otherwise ignored."""

    def __init__(self, path: str, timeout_s: float = 10.0) -> None:
        sock = connect_unix(path, timeout_s)
        sock.settimeout(timeout_s)
        self._sock = sock
        self._file = sock.makefile("rwb", buffering=0)
        self._lock = threading.Lock()
        self.events: list[tuple[str, Any]] = []
        greeting = self._read()
        if "QMP" not in greeting:
            raise QMPError(f"not a QMP greeting: {greeting}")
        self.execute("qmp_capabilities")

    def _read(self) -> dict[str, Any]:
        line = self._file.readline()
        if not line:
            raise ConnectionError("QMP connection closed")
        return json.loads(line)

    def execute(self, command: str, timeout_s: float | None = None, **arguments: Any) -> Any:
        msg: dict[str, Any] = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        with self._lock:
            if timeout_s is not None:
                self._sock.settimeout(timeout_s)
            self._file.write(json.dumps(msg).encode() + b"\n")
            return self._return_of(command)

    def _return_of(self, command: str) -> Any:
        """Read up to the reply of ``command`` (lock held), recording events on the way."""
        while True:
            reply = self._read()
            if "event" in reply:
                self.events.append((reply["event"], reply.get("data")))
                continue
            if "error" in reply:
                err = reply["error"]
                raise QMPError(f"{command}: {err.get('class')}: {err.get('desc')}")
            return reply.get("return")

    def send_fd(self, name: str, fd: int) -> None:
        """Hand QEMU a file descriptor (QMP ``getfd`` with the fd attached, SCM_RIGHTS); a
        later command names it ``fd:<name>``."""
        msg = json.dumps({"execute": "getfd", "arguments": {"fdname": name}}).encode() + b"\n"
        with self._lock:
            socket.send_fds(self._sock, [msg], [fd])
            self._return_of("getfd")

    def wait_event(self, name: str, timeout_s: float = 10.0) -> Any:
        """Block until event ``name`` arrives (or was already seen since the last call)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                for i, (ev, data) in enumerate(self.events):
                    if ev == name:
                        del self.events[: i + 1]
                        return data
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"QMP event {name} did not arrive in {timeout_s} s")
                self._sock.settimeout(left)
                reply = self._read()
                if "event" in reply:
                    self.events.append((reply["event"], reply.get("data")))

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            self._sock.close()
