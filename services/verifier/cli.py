"""``k3stack verify``: send a candidate to the verifier service and follow the job.

Registered through the ``k3stack.cli`` entry-point group (``pyproject.toml``), so the shared
CLI never imports the verifier. ``--local`` runs the kernel verifier in this process instead of
through the service (same sandbox, same result).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from shared.clients import ServiceClient, ServiceError
from shared.settings import get_settings

app = typer.Typer(
    help="Verify candidates: kernels (and the task list).",
    no_args_is_help=True,
    add_completion=False,
)
err = Console(stderr=True)
out = Console()


def _files(path: Path) -> dict[str, str]:
    if path.is_file():
        return {path.name: path.read_text()}
    if path.is_dir():
        return {str(p.relative_to(path)): p.read_text() for p in sorted(path.rglob("*.py"))}
    raise typer.BadParameter(f"{path} does not exist", param_hint="PATH")


def _summary(result: dict[str, Any]) -> None:
    out.print(f"[bold]reward {result.get('reward', 0):.3f}[/bold]  {result.get('reason', '')}")
    for d in result.get("detectors", []):
        out.print(f"  [red]{d['detector']}[/red]: {d['evidence']}")
    t = result.get("timings") or {}
    if t:
        out.print(
            f"  reference {t['reference_s'] * 1e3:.3f} ms · expert {t['expert_s'] * 1e3:.3f} ms · "
            f"candidate {t['candidate_s'] * 1e3:.3f} ms · roofline {t['roofline_s'] * 1e3:.3f} ms"
        )


@app.command("kernel")
def kernel(
    path: Annotated[
        Path, typer.Argument(help="Candidate .py file, or a directory with candidate.py.")
    ],
    task: Annotated[str, typer.Option("--task", help="Kernel task name (k3stack verify tasks).")],
    url: Annotated[str | None, typer.Option(help="Verifier URL (default: from settings).")] = None,
    local: Annotated[bool, typer.Option(help="Run here instead of through the service.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole result as JSON.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the job.")] = 900.0,
) -> None:
    """Verify a kernel candidate on a task, with progress; exit 0 when correct and unflagged."""
    files = _files(path)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        console=err,
    ) as bar:
        tid = bar.add_task("queued", total=1.0)
        if local:
            from services.verifier.kernel.spec import UnknownTask
            from services.verifier.kernel.verify import BadCandidate, verify_kernel

            try:
                result = verify_kernel(
                    task, path, progress=lambda f, m: bar.update(tid, completed=f, description=m)
                ).model_dump(mode="json")
            except (BadCandidate, UnknownTask) as exc:
                raise typer.BadParameter(str(exc)) from None
        else:
            result = _remote(
                url, "/verify/kernel", {"task": task, "files": files}, bar, tid, timeout
            )
        bar.update(tid, completed=1.0, description="done")
    if as_json:
        out.print_json(json.dumps(result))
    else:
        _summary(result)
    raise typer.Exit(0 if result.get("correct") and not result.get("detectors") else 1)


def _remote(
    url: str | None, route: str, body: dict[str, Any], bar: Progress, tid: Any, timeout: float
) -> dict[str, Any]:
    base = url or get_settings().service("verifier").base_url
    with ServiceClient(base) as client:
        try:
            job = client.post_json(route, body)
        except ServiceError as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(2) from None
        deadline = time.monotonic() + timeout
        while job["status"] not in ("succeeded", "failed", "cancelled"):
            if time.monotonic() > deadline:
                err.print(f"job {job['id']} still {job['status']} after {timeout:.0f} s")
                raise typer.Exit(3)
            time.sleep(0.5)
            job = client.get_json(f"/jobs/{job['id']}")
            p = job.get("progress") or {}
            bar.update(
                tid, completed=p.get("fraction", 0.0), description=p.get("message") or job["status"]
            )
    if job["status"] != "succeeded":
        err.print(
            f"[red]job {job['id']} {job['status']}: {(job.get('error') or {}).get('message', '')}[/red]"
        )
        raise typer.Exit(2)
    return job["result"]


@app.command("web")
def web(
    path: Annotated[
        Path, typer.Argument(help="The app's directory (static files, build.sh or package.json).")
    ],
    task: Annotated[str, typer.Option("--task", help="Web task name (k3stack verify tasks).")],
    url: Annotated[str | None, typer.Option(help="Verifier URL (default: from settings).")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole result as JSON.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the job.")] = 900.0,
    judge: Annotated[
        bool, typer.Option("--judge", help="Add the model-judge term (K3STACK_LLM_URL's model).")
    ] = False,
) -> None:
    """Verify a web app on a task through the service; exit 0 when the reward is positive."""
    import base64

    if not path.is_dir():
        raise typer.BadParameter(f"{path} is not a directory", param_hint="PATH")
    files, binary = {}, {}
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        data = p.read_bytes()
        try:
            files[str(p.relative_to(path))] = data.decode()
        except UnicodeDecodeError:
            binary[str(p.relative_to(path))] = base64.b64encode(data).decode()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        console=err,
    ) as bar:
        tid = bar.add_task("queued", total=1.0)
        result = _remote(
            url,
            "/verify/web",
            {"task": task, "files": files, "binary_files": binary, "judge": judge},
            bar,
            tid,
            timeout,
        )
        bar.update(tid, completed=1.0, description="done")
    if as_json:
        out.print_json(json.dumps(result))
    else:
        out.print(f"[bold]reward {result.get('reward', 0):.3f}[/bold]  {result.get('reason', '')}")
        if result.get("runtime"):
            out.print(f"  ran on: {result['runtime']}")
        for c in result.get("checks", []):
            out.print(
                f"  {'[green]pass[/green]' if c['passed'] else '[red]fail[/red]'} {c['name']} {c['detail']}"
            )
    raise typer.Exit(0 if result.get("reward", 0) > 0 else 1)


@app.command("tasks")
def tasks() -> None:
    """The kernel and submission-loop tasks."""
    from services.verifier.kernel.spec import load_task, task_names
    from services.verifier.submission.tasks import TASKS

    for name in task_names():
        out.print(f"kernel      {name:18s} {load_task(name).description}")
    for name, t in sorted(TASKS.items()):
        out.print(f"submission  {name:18s} {t.description.splitlines()[0]}")
