"""The smoke flow behind ``k3stack demo`` / ``make demo``: start the platform, touch every
service over HTTP through the shared clients, say what each step did, stop.

It becomes the orchestrator's main job (an episode end to end) once that service lands.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from shared.clients import (
    ModelClient,
    OrchestratorClient,
    SandboxClient,
    ToolsClient,
    VerifierClient,
)
from shared.settings import load_settings

console = Console()


def _step(title: str, fn: Callable[[], str]) -> bool:
    started = time.perf_counter()
    try:
        detail = fn()
    except Exception as exc:  # noqa: BLE001 - the demo reports every failure and goes on
        console.print(f"[red]✗[/] {title}: {exc}")
        return False
    console.print(
        f"[green]✓[/] {title} [dim]({(time.perf_counter() - started) * 1000:.0f} ms)[/]"
        f"\n    {detail}"
    )
    return True


def smoke(env: dict[str, str] | None = None) -> bool:
    """Run the smoke flow against a running platform; True when every step passed."""
    settings = load_settings()
    results: list[bool] = []
    with ModelClient.from_settings(settings) as model:
        results.append(
            _step("model: list served models", lambda: f"serves {', '.join(model.list_models())}")
        )
    with SandboxClient.from_settings(settings) as sandbox:

        def runtimes() -> str:
            rts: list[dict[str, Any]] = sandbox.get_json("/runtimes")
            usable = [r["name"] for r in rts if r["available"]]
            return f"runtimes available here: {', '.join(usable) or 'none'}"

        results.append(_step("sandbox: discover runtimes", runtimes))
    with ToolsClient.from_settings(settings) as tools:

        def world() -> str:
            w = tools.post_json("/worlds", {"scenario": "empty", "seed": 7})
            back = tools.get_json(f"/worlds/{w['id']}")
            return f"created world {back['id']} (scenario {back['scenario']}, seed {back['seed']})"

        results.append(_step("tools: create a world", world))
    with VerifierClient.from_settings(settings) as verifier:

        def job() -> str:
            created = verifier.create_job("echo", {"hello": "k3stack"})
            done = verifier.wait_job(created["id"], timeout_s=30)
            return (
                f"job {done['id'][:8]}… {done['status']} through a Celery worker, "
                f"sha256 {done['result']['sha256'][:12]}…"
            )

        results.append(_step("verifier: run a job through the queue", job))
    with OrchestratorClient.from_settings(settings) as orch:

        def platform() -> str:
            p = orch.platform()
            healthy = [s["service"] for s in p["services"] if s["healthy"]]
            return f"sees {len(healthy)}/{len(p['services'])} other services healthy"

        results.append(_step("orchestrator: check the platform over HTTP", platform))
    return all(results)


def run_demo(data_dir: Path | None = None, keep: bool = False) -> int:
    """Start the stack detached, run the smoke flow, stop it (unless ``keep``)."""
    cli = [sys.executable, "-m", "shared.cli"]
    extra = ["--data-dir", str(data_dir)] if data_dir else []
    console.rule("k3stack demo")
    up = subprocess.run([*cli, "up", "--detach", *extra], check=False)
    if up.returncode != 0:
        console.print("[red]k3stack up failed[/]")
        return up.returncode
    if data_dir:
        os.environ["K3STACK_DATA_DIR"] = str(data_dir)
    try:
        ok = smoke()
    finally:
        if not keep:
            subprocess.run([*cli, "down", *extra], check=False)
    console.rule("[green]demo passed" if ok else "[red]demo failed")
    if keep:
        console.print("the platform is still running; stop it with `k3stack down`")
    return 0 if ok else 1
