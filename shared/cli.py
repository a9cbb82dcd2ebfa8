"""``k3stack``: run the platform on one machine.

``k3stack up`` starts the five services and one Celery worker each with the embedded defaults
(SQLite, local object store, SQLite broker), waits until all are healthy, prints their URLs and
stays in the foreground until Ctrl-C; ``--detach`` returns instead, and ``k3stack down`` stops
what ``up`` started. Every child runs in its own process group, recorded in
``<data dir>/run/state.json``, so ``down`` leaves nothing behind.

Services add their own subcommands (``k3stack run``, ``k3stack verify``…) without ``shared``
importing them: an entry point in the ``k3stack.cli`` group names a Typer app, a click command
or a plain function (``[project.entry-points."k3stack.cli"] run = "services.orchestrator.cli:app"``),
loaded only when that command is used or listed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import click
import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperGroup

from shared.queue import worker_argv, worker_groups
from shared.settings import SERVICE_NAMES, SettingsError, load_settings, settings_table
from shared.startup_wait import StartupWatch

PLUGIN_GROUP = "k3stack.cli"


def plugin_entry_points() -> dict[str, Any]:
    """Name -> entry point of every subcommand registered in the ``k3stack.cli`` group."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


def _as_command(name: str, obj: Any) -> click.Command:
    if isinstance(obj, click.Command):
        command = obj  # listed and run under its entry-point name, whatever its own
    elif isinstance(obj, typer.Typer):
        command = typer.main.get_command(obj)
    elif callable(obj):
        single = typer.Typer(add_completion=False)
        single.command(name)(obj)
        command = typer.main.get_command(single)
    else:
        raise TypeError(f"{type(obj).__name__} is not a Typer app, click command or function")
    command.name = name
    return command


class _WithPlugins(TyperGroup):
    """The built-in commands, then those services register (built-ins win a name clash)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        own = super().list_commands(ctx)
        return own + sorted(set(plugin_entry_points()) - set(own))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        ep = None if command is not None else plugin_entry_points().get(cmd_name)
        if ep is None:
            return command
        try:
            return _as_command(cmd_name, ep.load())
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the CLI
            message = f"the {cmd_name!r} command ({ep.value}) failed to load: {exc}"
            return click.Command(cmd_name, help=message, callback=lambda: _fail(message))


app = typer.Typer(
    cls=_WithPlugins,
    help="Run and inspect k3stack on this machine (embedded defaults, no servers to install).",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)
out = Console()


@dataclass
class Child:
    name: str  # "model" or "model-worker"
    pid: int
    argv: list[str]
    log: str
    port: int | None = None


@dataclass
class RunState:
    data_dir: str
    started_at: float
    children: list[Child]
    urls: dict[str, str]

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> RunState | None:
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return cls(
            data_dir=raw["data_dir"],
            started_at=raw["started_at"],
            children=[Child(**c) for c in raw["children"]],
            urls=raw["urls"],
        )


def _state_path(data_dir: Path) -> Path:
    return data_dir / "run" / "state.json"


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _port_taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def live_groups(pgids: list[int]) -> set[int]:
    """The process groups of ``pgids`` that still hold a non-zombie process (one /proc scan).

    Zombies count as gone: once ``up --detach`` has exited, nobody here can reap its children.
    One scan for all groups keeps the stop loops cheap on a loaded machine with many processes.
    """
    wanted: set[int] = set()
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        wanted.add(pgid)
    proc = Path("/proc")
    if not wanted or not proc.is_dir():
        return wanted
    alive: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) in wanted and fields[0] != "Z":
            alive.add(int(fields[2]))
    return alive


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in process group ``pgid``."""
    return bool(live_groups([pgid]))


class StopSignals:
    """Ctrl-C and SIGTERM as a counter instead of ``KeyboardInterrupt``.

    An exception raised at an arbitrary point (inside rich's live display, an httpx call or a
    lock) can leave ``up`` stuck; a flag checked by the loops cannot. A second signal while
    stopping skips the grace period and kills at once.
    """

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _signum: int, _frame: object) -> None:
        self.count += 1

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)

    @property
    def requested(self) -> bool:
        return self.count > 0


def _reap(children: list[Child]) -> None:
    """Collect exited children of this process so they do not linger as zombies."""
    for child in children:
        try:
            os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _signal_groups(pgids: set[int], signum: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            pass


def _stop_children(
    children: list[Child], timeout_s: float = 10.0, hurry: StopSignals | None = None
) -> list[Child]:
    """SIGTERM every process group, wait up to ``timeout_s``, SIGKILL what is left.

    Bounded whatever the load: at most ``timeout_s`` for the grace period (cut short by a
    second Ctrl-C when ``hurry`` is given) plus 5 s for SIGKILL to land. Returns the survivors.
    """
    pgids = [c.pid for c in children]
    seen = hurry.count if hurry else 0
    _signal_groups(live_groups(pgids), signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(children)
        if not live_groups(pgids) or (hurry and hurry.count > seen):
            break
        time.sleep(0.1)
    _signal_groups(live_groups(pgids), signal.SIGKILL)
    deadline = time.monotonic() + 5.0  # SIGKILL is not instant for a process in I/O
    while time.monotonic() < deadline:
        _reap(children)
        if not live_groups(pgids):
            break
        time.sleep(0.1)
    _reap(children)
    left = live_groups(pgids)
    return [c for c in children if c.pid in left]


def _resolve_data_dir(data_dir: Path | None) -> Path:
    try:
        settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    except SettingsError as exc:
        _fail(str(exc))
    return settings.data_dir


def _parse_services(services: str | None) -> list[str]:
    if not services:
        return list(SERVICE_NAMES)
    chosen = [s.strip() for s in services.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SERVICE_NAMES]
    if unknown:
        _fail(f"unknown service(s) {', '.join(unknown)}; choose from {', '.join(SERVICE_NAMES)}")
    return [s for s in SERVICE_NAMES if s in chosen]


def _parse_ports(port: list[str], port_base: int | None) -> dict[str, int]:
    ports: dict[str, int] = {}
    if port_base is not None:
        for i, name in enumerate(SERVICE_NAMES):
            ports[name] = port_base + i
    for item in port:
        name, _, value = item.partition("=")
        if name not in SERVICE_NAMES or not value.isdigit() or not 0 < int(value) < 65536:
            _fail(
                f"--port takes SERVICE=PORT with SERVICE one of {', '.join(SERVICE_NAMES)}; "
                f"got {item!r}"
            )
        ports[name] = int(value)
    return ports


def _worker_ready(log: Path) -> bool:
    try:
        return b" ready." in log.read_bytes()[-20000:]
    except OSError:
        return False


def _health(url: str) -> tuple[bool, str]:
    try:
        r = httpx.get(f"{url}/health", timeout=2.0)
        body = r.json()
        return r.status_code == 200 and body.get("status") == "ok", body.get("status", "?")
    except (httpx.HTTPError, ValueError) as exc:
        return False, type(exc).__name__


@app.command()
def up(
    services: Annotated[
        str | None, typer.Option(help="Comma-separated subset, e.g. model,tools (default: all).")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory (default K3STACK_DATA_DIR or ~/.k3stack).")
    ] = None,
    port: Annotated[
        list[str], typer.Option(help="SERVICE=PORT, repeatable, e.g. --port model=9000.")
    ] = [],  # noqa: B006 - typer reads the default
    port_base: Annotated[
        int | None, typer.Option(help="Give the services consecutive ports from this one.")
    ] = None,
    workers: Annotated[bool, typer.Option(help="Start one Celery worker per service.")] = True,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Return once healthy; stop with `k3stack down`.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            help="Most seconds to wait for health in all (a loaded 2-core machine can take "
            "minutes to import the model service)."
        ),
    ] = 600.0,
    stall_timeout: Annotated[
        float,
        typer.Option(
            help="Give up on a service still not healthy that showed no progress (CPU time or "
            "log output) for this many seconds."
        ),
    ] = 120.0,
    stop_timeout: Annotated[
        float,
        typer.Option(help="On Ctrl-C, seconds of grace before SIGKILL (a second Ctrl-C: now)."),
    ] = 10.0,
) -> None:
    """Start the platform locally and wait until every service is healthy.

    In the foreground it then supervises: a service or worker that exits is restarted (at once,
    then with a doubling backoff); one that exits 5 times within 5 minutes stops the stack."""
    chosen = _parse_services(services)
    overrides = _parse_ports(port, port_base)
    base_env = dict(os.environ)
    if data_dir:
        base_env["K3STACK_DATA_DIR"] = str(data_dir)
    for name, p in overrides.items():
        base_env[f"K3STACK_{name.upper()}__PORT"] = str(p)
    try:
        settings = load_settings(
            **({"data_dir": data_dir} if data_dir else {}),
            **{name: {"port": p} for name, p in overrides.items()},
        )
    except SettingsError as exc:
        _fail(str(exc))
        return
    ddir = settings.data_dir
    state_file = _state_path(ddir)
    previous = RunState.load(state_file)
    if previous and any(group_alive(c.pid) for c in previous.children):
        _fail(
            f"k3stack is already running from {ddir} (pids in {state_file}); "
            "run `k3stack down` first"
        )
    for name in chosen:
        section = settings.service(name)
        if _port_taken(section.host, section.port):
            _fail(
                f"port {section.port} ({name}) is already in use on {section.host}; "
                f"free it or choose another with --port {name}=PORT"
            )
    # Every service learns where the others are.
    for name in SERVICE_NAMES:
        s = settings.service(name)
        base_env.setdefault(f"K3STACK_{name.upper()}__URL", s.base_url)
    logs = ddir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    children: list[Child] = []
    urls = {name: settings.service(name).base_url for name in chosen}

    def start(name: str, argv: list[str]) -> int:
        """The child's process (a new session: its group is stopped whole), logging to its file."""
        log_path = logs / f"{name}.log"
        fh = open(log_path, "ab")  # noqa: SIM115 - the child owns it
        fh.write(f"\n--- k3stack up {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode())
        fh.flush()
        proc = subprocess.Popen(
            [sys.executable, *argv],
            env=base_env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        fh.close()
        return proc.pid

    def spawn(name: str, argv: list[str], port_: int | None) -> None:
        pid = start(name, argv)
        log_path = str(logs / f"{name}.log")
        children.append(Child(name=name, pid=pid, argv=argv, log=log_path, port=port_))

    stop = StopSignals()
    if not detach:
        stop.install()  # before the first child exists, so no Ctrl-C escapes as an exception
    for name in chosen:
        spawn(name, ["-m", f"services.{name}"], settings.service(name).port)
    if workers:
        for name in chosen:
            for label, queues, conc in worker_groups(name, settings):
                argv = worker_argv(name, conc, pool="threads", queues=queues, name=label)
                spawn(label, argv, None)
    state = RunState(data_dir=str(ddir), started_at=time.time(), children=children, urls=urls)
    state.save(state_file)

    def shut_down() -> None:
        left = _stop_children(children, stop_timeout, hurry=stop)
        state_file.unlink(missing_ok=True)
        if left:
            _fail(f"could not stop: {', '.join(f'{c.name} ({c.pid})' for c in left)}")

    def abort(message: str, code: int = 2) -> None:
        shut_down()
        _fail(message, code)

    pending = {c.name for c in children}
    started = time.monotonic()
    watch = StartupWatch(stall_s=stall_timeout, budget_s=timeout)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("starting k3stack", total=len(children))
        while pending and not stop.requested:
            for child in children:
                if child.name not in pending or stop.requested:
                    continue
                if not group_alive(child.pid):
                    tail = Path(child.log).read_text(errors="replace")[-1500:]
                    abort(
                        f"{child.name} exited during start-up; last log lines "
                        f"({child.log}):\n{tail}"
                    )
                ok = (
                    _worker_ready(Path(child.log))
                    if child.port is None
                    else _health(urls[child.name])[0]
                )
                if ok:
                    pending.discard(child.name)
                    progress.update(task, advance=1, description=f"{child.name} ready")
                else:
                    watch.look(child.name, child.pid, child.log)
            if stalled := watch.stalled(pending):
                abort(
                    f"not healthy and no progress (CPU time, log output) for "
                    f"{stall_timeout:.0f}s: {', '.join(stalled)}; see logs in {logs}"
                )
            if watch.over_budget():
                abort(
                    f"not healthy after {timeout:.0f}s: {', '.join(sorted(pending))}; "
                    f"see logs in {logs}"
                )
            if pending:
                waiting = ", ".join(sorted(pending))
                progress.update(task, description=f"waiting for {waiting}")
            time.sleep(0.2)
    if stop.requested:
        abort("interrupted during start-up; stopped everything", code=130)

    table = Table(title=f"k3stack up in {time.monotonic() - started:.1f}s — data in {ddir}")
    table.add_column("service")
    table.add_column("url")
    table.add_column("docs")
    for name, url in urls.items():
        table.add_row(name, url, f"{url}/docs")
    out.print(table)
    if detach:
        out.print(
            "running in the background; stop with [bold]k3stack down"
            + (f" --data-dir {data_dir}" if data_dir else "")
            + "[/]"
        )
        return
    out.print("press Ctrl-C to stop")
    out.file.flush()
    supervisor = Supervisor()
    while not stop.requested:
        alive = live_groups([c.pid for c in children])
        now = time.monotonic()
        for child in children:
            if child.pid in alive:
                continue
            due = supervisor.exited(child.name, now)
            if due is None:
                abort(
                    f"{child.name} exited {Supervisor.MAX_RESTARTS} times within "
                    f"{Supervisor.WINDOW_S:.0f}s; stopped everything (its log: {child.log})",
                    code=1,
                )
            if now < due:
                continue
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child.pid, os.WNOHANG)  # reap the one that died
            child.pid = start(child.name, child.argv)
            supervisor.restarted(child.name)
            state.save(state_file)
            console.print(f"[yellow]restarted:[/] {child.name} (pid {child.pid})")
            out.print(f"restarted {child.name}")
            out.file.flush()
        time.sleep(0.2)
    console.print("stopping k3stack…")
    shut_down()
    out.print("k3stack stopped")


class Supervisor:
    """When to restart a child of ``k3stack up`` that exited: at once the first time, then after
    a backoff doubling up to ``MAX_DELAY_S``; ``None`` once it exited ``MAX_RESTARTS`` times
    within ``WINDOW_S`` (a crash loop is a fault to report, not to hide)."""

    MAX_RESTARTS = 5
    WINDOW_S = 300.0
    MAX_DELAY_S = 30.0

    def __init__(self) -> None:
        self.history: dict[str, list[float]] = {}
        self.due: dict[str, float] = {}

    def exited(self, name: str, now: float) -> float | None:
        if name in self.due:
            return self.due[name]
        recent = [t for t in self.history.get(name, []) if now - t < self.WINDOW_S]
        self.history[name] = recent
        if len(recent) >= self.MAX_RESTARTS:
            return None
        delay = 0.0 if not recent else min(self.MAX_DELAY_S, 2.0 ** (len(recent) - 1))
        self.due[name] = now + delay
        self.history[name].append(now)
        return self.due[name]

    def restarted(self, name: str) -> None:
        self.due.pop(name, None)


@app.command()
def down(
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory of the running stack.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before SIGKILL.")] = 10.0,
) -> None:
    """Stop everything `k3stack up` started from this data directory."""
    ddir = _resolve_data_dir(data_dir)
    state_file = _state_path(ddir)
    state = RunState.load(state_file)
    if state is None:
        out.print(f"nothing running from {ddir}")
        return
    left = _stop_children(state.children, timeout)
    if left:
        _fail(f"still alive after SIGKILL: {', '.join(f'{c.name} ({c.pid})' for c in left)}")
    state_file.unlink(missing_ok=True)
    out.print(f"stopped {len(state.children)} processes")


@app.command()
def status(
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory of the running stack.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show each service's process and health."""
    ddir = _resolve_data_dir(data_dir)
    state = RunState.load(_state_path(ddir))
    if state is None:
        if as_json:
            out.print_json(data={"running": False, "services": []})
        else:
            out.print(f"nothing running from {ddir}")
        raise typer.Exit(1)
    rows = []
    for child in state.children:
        alive = group_alive(child.pid)
        health = "-"
        if child.port is not None and alive:
            ok, health = _health(state.urls[child.name])
        elif child.port is None:
            health = "ready" if alive and _worker_ready(Path(child.log)) else "-"
        rows.append(
            {
                "name": child.name,
                "pid": child.pid,
                "alive": alive,
                "health": health,
                "url": state.urls.get(child.name, ""),
            }
        )
    if as_json:
        out.print_json(data={"running": True, "services": rows})
        return
    table = Table(title=f"k3stack — {ddir}")
    for col in ("process", "pid", "alive", "health", "url"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["name"],
            str(r["pid"]),
            "yes" if r["alive"] else "[red]no[/]",
            str(r["health"]),
            r["url"],
        )
    out.print(table)


@app.command()
def logs(
    service: Annotated[str, typer.Argument(help="Service name, e.g. model.")],
    worker: Annotated[bool, typer.Option(help="Show the service's Celery worker log.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines from the end.")] = 50,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Data directory of the stack.")] = None,
) -> None:
    """Print a service's log (or its worker's)."""
    if service not in SERVICE_NAMES:
        _fail(f"unknown service {service!r}; choose from {', '.join(SERVICE_NAMES)}")
    ddir = _resolve_data_dir(data_dir)
    path = ddir / "logs" / f"{service}{'-worker' if worker else ''}.log"
    if not path.exists():
        _fail(f"no log at {path}; has `k3stack up` run with this data dir?")
    with open(path, "rb") as fh:
        data = fh.read().decode(errors="replace").splitlines()
        for line in data[-lines:]:
            print(line)
        while follow:
            chunk = fh.read()
            if chunk:
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
            else:
                time.sleep(0.3)


@app.command()
def demo(
    data_dir: Annotated[Path | None, typer.Option(help="Data directory for the demo.")] = None,
    keep: Annotated[bool, typer.Option(help="Leave the platform running afterwards.")] = False,
) -> None:
    """Start the platform, touch every service over HTTP, then run a multi-day scenario as an
    orchestrator episode (oracle policy, claude-code, microVM: score table and HTML report)
    and a short episode of it driven by a model; stop the platform."""
    from shared.demo import run_demo

    raise typer.Exit(run_demo(data_dir, keep))


@app.command("settings")
def show_settings() -> None:
    """List every K3STACK_* variable with its default and meaning."""
    table = Table(title="k3stack settings (environment variables)")
    for col in ("variable", "default", "meaning"):
        table.add_column(col, overflow="fold")
    for var, default, desc in settings_table():
        table.add_row(var, default, desc)
    out.print(table)


if __name__ == "__main__":
    app()
