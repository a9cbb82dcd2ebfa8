"""The waits built on tenacity: a probe asked again until it says yes (``shared.until``), and a
unix socket connected once its server listens (``services.sandbox.runtime.sockets``)."""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from services.sandbox.runtime.sockets import connect_unix
from shared.until import until, until_async


def test_until_asks_again_through_listed_errors_until_yes() -> None:
    answers = iter([ConnectionError("refused"), False, True])

    def probe() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert until(probe, timeout_s=30, every_s=0.001, errors=(ConnectionError,))
    assert next(answers, "spent") == "spent"


def test_until_says_no_once_the_time_is_over() -> None:
    calls = []
    started = time.monotonic()
    assert not until(lambda: calls.append(1) is not None, timeout_s=0.2, every_s=0.05)
    assert time.monotonic() - started >= 0.2 and len(calls) >= 2


def test_an_error_not_listed_ends_the_wait_at_once() -> None:
    calls = []

    def probe() -> bool:
        calls.append(1)
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="exited"):
        until(probe, timeout_s=30, every_s=0.001, errors=(ConnectionError,))
    assert len(calls) == 1


def test_until_async() -> None:
    answers = iter([False, False, True])

    async def probe() -> bool:
        return next(answers)

    assert asyncio.run(until_async(probe, timeout_s=30, every_s=0.001))


def test_connect_unix_waits_for_the_listener() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "s.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

        def listen_later() -> None:
            time.sleep(0.2)
            server.bind(path)
            server.listen(1)

        thread = threading.Thread(target=listen_later)
        thread.start()
        try:
            sock = connect_unix(path, timeout_s=60)
            sock.close()
        finally:
            thread.join()
            server.close()


def test_connect_unix_raises_the_last_error_when_nothing_listens() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        with pytest.raises(FileNotFoundError):
            connect_unix(str(Path(tmp) / "absent.sock"), timeout_s=0.1)
        assert time.monotonic() - started >= 0.1
