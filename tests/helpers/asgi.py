"""Serve an ASGI app over real HTTP in a thread of the test process (uvicorn, free port).

For tests that need real sockets and timeouts (an in-process transport has neither)::

    with serve(create_app(settings)) as url:
        client = SandboxClient(url, timeout=1.0)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.helpers.servers import free_port


@contextmanager
def serve(app: Any, *, lifespan: str = "on", timeout: float = 60.0) -> Iterator[str]:
    """Yield the base URL once the server has started (lifespan included); stop it after."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan)
    )
    thread = threading.Thread(target=server.run, name=f"uvicorn:{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server thread exited during start-up")
        if time.monotonic() > deadline:
            raise TimeoutError(f"server did not start within {timeout} s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
