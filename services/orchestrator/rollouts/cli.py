"""``k3stack rollout ...`` and ``k3stack export``: registered through the ``k3stack.cli`` entry
points. ``rollout create FILE.json`` posts a batch (the ``POST /rollouts`` body) and, with
``--watch``, follows it in a live table (phase, steps, reward, version spans per sample);
``rollout iterate ID --version TAG [--base-url URL]`` starts the next iteration;
``rollout cancel ID [--sample SID]`` cancels the batch (or one sample); ``rollout show ID``
prints the table once; ``export ID --format jsonl|atif --out FILE`` writes
the export with a progress bar."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.progress import Progress
from rich.table import Table

from services.orchestrator.cli_fail import fail

console = Console()
rollout_app = typer.Typer(
    help="RL rollout batches: create, iterate, cancel, watch.", add_completion=False
)


def _client() -> Any:
    from shared.clients import OrchestratorClient

    return OrchestratorClient.from_settings()


def table(view: dict[str, Any]) -> Table:
    t = Table(title=f"rollout {view['id']} · iteration {view['iteration']} · "
              f"{view['policy']['version']} · λ={view['lam']} · {view['counts']}")  # fmt: skip
    for col in ("sample", "phase", "steps", "tokens", "reward", "versions"):
        t.add_column(col)
    for s in view["samples"]:
        spans = " ".join(f"{v['version']}[{v['start']}:{v['end']}]" for v in s["versions"])
        reward = "" if s["reward"] is None else f"{s['reward']:g}"
        t.add_row(f"{s['task_index']}/{s['k']}", s["phase"], str(s["steps"]),
                  str(s["completion_tokens"]), reward, spans)  # fmt: skip
    return t


def _settled(view: dict[str, Any]) -> bool:
    return all(s["status"] not in ("queued", "running") for s in view["samples"])


def _watch(client: Any, rollout_id: str, interval: float = 1.0) -> None:
    view = client.get_json(f"/rollouts/{rollout_id}")
    with Live(table(view), console=console, refresh_per_second=4) as live:
        while not _settled(view):
            time.sleep(interval)
            view = client.get_json(f"/rollouts/{rollout_id}")
            live.update(table(view))


@rollout_app.command("create")
def create(
    body: Annotated[Path, typer.Argument(help="JSON file: the POST /rollouts body.")],
    watch: Annotated[bool, typer.Option(help="Follow the batch live.")] = True,
) -> None:
    from shared.clients import ServiceError

    try:
        payload = json.loads(body.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        fail(f"{body}: {exc}")
    try:
        with _client() as client:
            view = client.post_json("/rollouts", payload)
            console.print(f"rollout [bold]{view['id']}[/bold]")
            if watch:
                _watch(client, view["id"])
    except ServiceError as exc:
        fail(str(exc))


@rollout_app.command("iterate")
def iterate_cmd(
    rollout_id: str,
    version: Annotated[str, typer.Option(help="The new policy version tag.")],
    base_url: Annotated[
        str | None, typer.Option(help="Its endpoint (default: model service).")
    ] = None,
    lam: Annotated[float | None, typer.Option(help="λ for this iteration.")] = None,
    watch: bool = True,
) -> None:
    from shared.clients import ServiceError

    body: dict[str, Any] = {"policy": {"version": version, "base_url": base_url}}
    if lam is not None:
        body["lam"] = lam
    try:
        with _client() as client:
            client.post_json(f"/rollouts/{rollout_id}/iterate", body)
            if watch:
                _watch(client, rollout_id)
    except ServiceError as exc:
        fail(str(exc))


@rollout_app.command("cancel")
def cancel_cmd(
    rollout_id: str,
    sample: Annotated[str | None, typer.Option(help="Only this sample id.")] = None,
) -> None:
    """Cancel every unfinished sample (or one): each stops at its next tick."""
    from shared.clients import ServiceError

    path = f"/rollouts/{rollout_id}" + (f"/samples/{sample}" if sample else "") + "/cancel"
    try:
        with _client() as client:
            console.print(table(client.post_json(path, {})))
    except ServiceError as exc:
        fail(str(exc))


@rollout_app.command("show")
def show(rollout_id: str) -> None:
    from shared.clients import ServiceError

    try:
        with _client() as client:
            console.print(table(client.get_json(f"/rollouts/{rollout_id}")))
    except ServiceError as exc:
        fail(str(exc))


def export(
    rollout_id: str,
    format: Annotated[str, typer.Option(help="jsonl or atif")] = "jsonl",
    out: Annotated[Path, typer.Option(help="Output file.")] = Path("rollout.jsonl"),
) -> None:
    """Write a rollout's export (one sample a line) with a progress bar."""
    from shared.clients import ServiceError

    if format not in ("jsonl", "atif"):
        fail(f"--format must be jsonl or atif, not {format!r}")
    try:
        with _client() as client:
            total = len(client.get_json(f"/rollouts/{rollout_id}")["samples"])
            with client._http.stream("GET", f"/rollouts/{rollout_id}/export",
                                    params={"format": format}) as resp, \
                    out.open("w", encoding="utf-8") as fh, Progress(console=console) as bar:  # fmt: skip
                if resp.status_code >= 400:
                    resp.read()
                    fail(f"{resp.status_code}: {resp.text[:500]}")
                task = bar.add_task(f"export {format}", total=total)
                for line in resp.iter_lines():
                    if line:
                        fh.write(line + "\n")
                        bar.advance(task)
    except ServiceError as exc:
        fail(str(exc))
    console.print(f"wrote {out}")
