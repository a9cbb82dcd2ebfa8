"""The SGLang backend's start-up wait (a health probe asked again by tenacity): it returns once
``/health`` answers 200, names the exit code of a server that died while starting, and gives up
by name after ``startup_timeout_s``. Stand-in servers: small Python processes, no SGLang."""

from __future__ import annotations

import asyncio
import sys

import pytest

from services.model.serving.backends.sglang import SGLangBackend, SGLangUnavailable
from tests.helpers.servers import free_port

HEALTHY_LATER = """
import http.server, sys, time
time.sleep(0.5)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _backend(code: str, *args: str, timeout_s: float = 120.0) -> tuple[SGLangBackend, int]:
    port = free_port()
    cmd = [sys.executable, "-c", code, str(port), *args]
    url = f"http://127.0.0.1:{port}"
    return SGLangBackend("k3", upstream_url=url, command=cmd, startup_timeout_s=timeout_s), port


def test_start_returns_once_health_answers() -> None:
    backend, _ = _backend(HEALTHY_LATER)

    async def run() -> None:
        try:
            await backend.start()
            assert backend._proc is not None and backend._proc.poll() is None
        finally:
            await backend.stop()

    asyncio.run(run())


def test_a_server_that_exits_is_named_with_its_code() -> None:
    backend, _ = _backend("import sys; print('no GPU here'); sys.exit(3)")
    with pytest.raises(SGLangUnavailable, match="exited with 3"):
        asyncio.run(backend.start())


def test_a_server_that_never_answers_is_given_up_on() -> None:
    backend, _ = _backend("import time; time.sleep(600)", timeout_s=2.0)
    with pytest.raises(SGLangUnavailable, match="not ready after 2s"):
        asyncio.run(backend.start())
    assert backend._proc is None  # stopped
