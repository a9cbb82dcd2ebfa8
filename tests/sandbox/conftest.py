"""Fixtures of the sandbox tests: a service app on a private data dir, per runtime.

``service`` yields a factory: ``service(runtime="process")`` starts the app (lifespan and all)
on this test's data dir and returns a ``TestClient``; calling it again after ``stop()`` starts
a new app instance on the same data dir and database — a service restart. Every sandbox still
running at the end is destroyed, so no bwrap or QEMU process outlives its test.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shared.settings import Settings, load_settings


def process_runtime_ready() -> tuple[bool, str]:
    from services.sandbox.runtime.process import ProcessRuntime

    return ProcessRuntime(Path("/nonexistent")).available()


class Service:
    """A started sandbox app and its client; ``restart()`` gives a new instance on the same data."""

    def __init__(
        self, settings: Settings, runtime: str, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.clock = clock
        self.client: TestClient | None = None

    def start(self) -> TestClient:
        from services.sandbox.app import create_app

        app = create_app(self.settings, background=False, clock=self.clock)
        self.client = TestClient(app)
        self.client.__enter__()
        return self.client

    @property
    def manager(self):  # type: ignore[no-untyped-def]
        assert self.client is not None
        return self.client.app.state.manager  # type: ignore[attr-defined]

    def stop(self) -> None:
        if self.client is not None:
            self.client.__exit__(None, None, None)
            self.client = None

    def restart(self) -> TestClient:
        self.stop()
        return self.start()

    def destroy_all(self) -> None:
        if self.client is None:
            self.start()
        m = self.manager
        for sid in m.running_ids():
            try:
                m.kill(sid)
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
        self.stop()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    made: list[Service] = []

    def make(
        runtime: str = "process", clock: Callable[[], datetime] | None = None, **sandbox: object
    ) -> Service:
        settings = load_settings(
            data_dir=tmp_path / "data",
            # no warm pool unless a test asks: each pooled QEMU costs this 2-core host
            sandbox={"runtime": runtime, "reaper_interval_s": 3600, "warm_pool": 0, **sandbox},
        )
        svc = Service(settings, runtime, clock)
        svc.start()
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.destroy_all()
    shutil.rmtree(tmp_path / "data", ignore_errors=True)


@pytest.fixture
def proc(service: Callable[..., Service]) -> Service:
    ok, why = process_runtime_ready()
    if not ok:
        pytest.fail(f"the process runtime cannot run here: {why}")
    return service("process")


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = f"hello from {self.server.server_address[1]}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_servers():
    """Two loopback HTTP servers: one to allow, one that must stay unreachable."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Hello) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield [s.server_address[1] for s in servers]
    for s in servers:
        s.shutdown()
        s.server_close()


@contextmanager
def served(data_dir: Path, runtime: str, **sandbox: object) -> Iterator[str]:
    """The sandbox app on a private port (a real server: streams held open over HTTP), its base
    URL; every sandbox still running at the end is killed."""
    from services.sandbox.app import create_app
    from tests.helpers.asgi import serve

    settings = load_settings(
        data_dir=data_dir,
        sandbox={"runtime": runtime, "reaper_interval_s": 3600, "default_timeout_s": 0,
                 "warm_pool": 0, **sandbox},
    )  # fmt: skip
    app = create_app(settings, background=False)
    with serve(app) as base:
        yield base
        m = app.state.manager
        for sid in m.running_ids():
            m.kill(sid)
