"""The orchestrator CLIs' one way to fail (``k3stack harness``/``run`` and ``rollout``/``export``)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape


def fail(message: str) -> None:
    """Print ``error: message`` to stderr and exit 1.

    Unwrapped, so a path in it stays whole, and unparsed, so a '[x]' in it is text, not markup.
    """
    Console(stderr=True, soft_wrap=True).print(
        f"[red]error:[/red] {escape(message)}", highlight=False
    )
    raise typer.Exit(1)
