"""Run a service's app with uvicorn: what ``python -m services.<name>`` calls (handing over
its own app factory, so ``shared`` never imports a service)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from shared.settings import SettingsError, get_settings

GRACEFUL_SHUTDOWN_S = 3
"""Seconds a stopping service waits for open requests before cancelling them."""


def serve(service: str, create_app: Callable[[], Any], argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m services.{service}",
        description=f"Run the k3stack {service} service (settings: K3STACK_* variables).",
    )
    parser.add_argument("--host", help="bind address (default K3STACK_<SERVICE>__HOST)")
    parser.add_argument("--port", type=int, help="port (default K3STACK_<SERVICE>__PORT)")
    args = parser.parse_args(argv)
    try:
        settings = get_settings()
    except SettingsError as exc:
        print(f"k3stack {service}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    section = settings.service(service)
    try:
        app = create_app()
    except SettingsError as exc:  # the deployed-mode refusals (shared.settings.check_deployed)
        print(f"k3stack {service}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    import uvicorn

    uvicorn.run(
        app,
        host=args.host or section.host,
        port=args.port if args.port is not None else section.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        log_config=None,
        # open streams (a streamed `sleep 1000`) must not hold a stop past `k3stack down`'s
        # grace: after this they are cancelled and the lifespan's shutdown runs
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
