"""Fixtures for the model service tests: the shipped tokenizer, and real servers.

``model_server`` runs the service with the ``reference`` engine on the tiny K3 preset with random
weights, under uvicorn on a free port, once per session (start-up takes well under a second);
``serve_app`` runs any other app the same way, for the backends that sit in front of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.helpers.servers import free_port

try:  # two cores shared by many: keep torch to one thread
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass

ENGINE_SETTINGS: dict[str, Any] = {
    "engine": "reference",
    "preset": "tiny",
    "served_model_name": "k3-tiny",
    "max_num_seqs": 8,
    "max_num_batched_tokens": 256,
    "max_pool_tokens": 16384,
    "max_model_len": 2048,
    "num_threads": 1,
    "seed": 0,
}


class ServerThread:
    """A uvicorn server for ``app`` in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server thread exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError("server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@contextmanager
def running(app: Any) -> Iterator[ServerThread]:
    server = ServerThread(app).start()
    try:
        yield server
    finally:
        server.stop()


def model_settings(**model: Any):  # type: ignore[no-untyped-def]
    from shared.settings import load_settings

    return load_settings(model={**ENGINE_SETTINGS, **model})


@pytest.fixture(scope="session")
def tokenizer():
    from services.model.tokenizer import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def model_server() -> Iterator[ServerThread]:
    """The model service, reference engine, tiny preset, random weights, on a real port."""
    from services.model.app import create_app

    with running(create_app(model_settings())) as server:
        yield server


@pytest.fixture
def serve_app() -> Callable[[Any], Any]:
    """``serve_app(app)`` -> a started :class:`ServerThread`, stopped after the test."""
    servers: list[ServerThread] = []

    def start(app: Any) -> ServerThread:
        server = ServerThread(app).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()
