"""``make soak``: the whole platform under agent-RL load, on default settings, with faults.

Starts ``k3stack up`` (embedded mode: SQLite, local store, embedded broker) in a private data
dir, then keeps ``--concurrency`` pieces of work in flight for ``--minutes``: white-box episodes
with the oracle policy across presets and scenarios (real-CLI episodes with ``--cli``), E2B-SDK
sandbox churn (create, exec, files, pause, resume, kill), kernel verifier jobs and world churn in
the tools service. Faults on a schedule (``--fault-every``): SIGKILL of an orchestrator worker, a
verifier worker, the sandbox service, a QEMU. ``k3stack up`` restarts what was killed.

Every run is classified: ``full`` (the oracle's full score), ``named:<outcome>`` (a failure the
platform named), ``BELOW_FULL`` (reported done below the oracle's score: never acceptable) or
``error:<what>`` (the soak's own call failed). At the end: nothing left queued or running,
no sandbox, no process, QEMU or /dev/shm file of the run left after the stack stops, and RSS at
the end within 1.5x of RSS after 5 minutes (runs of 10 minutes or more). A progress bar while it
runs, a summary table at the end, and an HTML report (``--report``) with plots over time.

    python scripts/soak.py --minutes 20 --concurrency 4     # the long run of issue 43
    python scripts/soak.py                                  # make soak: a short default

Exit status 1 when any check fails (each is named on the terminal and in the report).
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.soak_report import Run, Sample, SoakResult, outcome_table, write_report  # noqa: E402

SERVICES = ("model", "sandbox", "tools", "verifier", "orchestrator")
SCENARIOS = ("hr_onboarding", "finance_expenses", "hr_leave")
PRESETS = ("claude-code", "codex", "kimi-code", "openclaw", "hermes")
TERMINAL = ("succeeded", "failed", "cancelled")
console = Console(stderr=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    """``k3stack up`` in the foreground, as a user runs it; its children from its state file."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ports = {name: free_port() for name in SERVICES}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
        self.env["K3STACK_DATA_DIR"] = str(data_dir)
        for name, port in self.ports.items():
            self.env[f"K3STACK_{name.upper()}__PORT"] = str(port)
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shared.cli", "up"], env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip

        def pump() -> None:
            assert self.proc and self.proc.stdout
            for line in self.proc.stdout:
                self.lines.put(line)
            self.lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        # up's own start-up rules decide (progress-following, 600 s budget); it prints this once
        # every service is healthy, or exits naming what did not come up.
        seen = []
        while (line := self.lines.get()) is not None:
            seen.append(line)
            if "press Ctrl-C to stop" in line:
                return
        raise SystemExit("k3stack up did not start:\n" + "".join(seen[-30:]))

    def children(self) -> dict[str, int]:
        state = self.data_dir / "run" / "state.json"
        try:
            return {c["name"]: c["pid"] for c in json.loads(state.read_text())["children"]}
        except (OSError, ValueError, KeyError):
            return {}

    def stop(self) -> int:
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def _pids_of_group(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def _rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def processes_mentioning(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            blob = (
                Path(f"/proc/{pid}/cmdline").read_bytes()
                + Path(f"/proc/{pid}/environ").read_bytes()
            )
            if marker.encode() in blob and ") Z " not in Path(f"/proc/{pid}/stat").read_text():
                argv = blob.split(b"\0")[:4]
                found.append(f"{pid}: {argv}")
        except OSError:
            continue
    return found


class Soak:
    def __init__(self, stack: Stack, result: SoakResult, cli: bool) -> None:
        self.stack, self.result, self.cli = stack, result, cli
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.counter = itertools.count()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def http(self, name: str) -> httpx.Client:
        """A client of one service; the tools service wants its admin key in every mode, which
        embedded mode keeps in the data dir for the platform's own clients (shared/auth.py)."""
        key = self.stack.data_dir / "keys" / f"{name}.key"
        headers = {"X-API-Key": key.read_text().strip()} if key.exists() else {}
        return httpx.Client(base_url=self.stack.url(name), timeout=120, headers=headers)

    # ---- work ------------------------------------------------------------------------------

    def episode(self, run: Run, harness: str | None = None) -> None:
        n = next(self.counter)
        scenario = SCENARIOS[n % len(SCENARIOS)]
        harness = harness or PRESETS[n % len(PRESETS)]
        run.label = f"{scenario} / {harness}"
        body = {"task": {"scenario": scenario, "seed": n}, "harness": harness,
                "policy": {"kind": "oracle"}}  # fmt: skip
        with self.http("orchestrator") as orch:
            resp = orch.post("/episodes", json=body)
            if resp.status_code != 202:
                run.verdict, run.detail = f"error:http_{resp.status_code}", resp.text[:300]
                return
            ep = self._wait(orch, f"/episodes/{resp.json()['id']}")
        run.detail = f"{ep['events_passed']}/{ep['events_total']} {ep.get('exit_reason')}"
        full = ep["events_total"] and ep["events_passed"] == ep["events_total"]
        if ep["status"] == "succeeded":
            run.verdict = "full" if full else "BELOW_FULL"
        else:
            run.verdict = f"named:{ep.get('error_code') or ep.get('exit_reason') or ep['status']}"

    def sandbox(self, run: Run) -> None:
        from e2b import Sandbox

        url = self.stack.url("sandbox")
        opts = {"api_key": "e2b_soak", "api_url": url, "sandbox_url": url}
        run.label = "create/exec/files/pause/resume/kill"
        sbx = Sandbox.create(template="busybox", timeout=600, **opts)
        try:
            out = sbx.commands.run("echo soak")
            assert (out.exit_code, out.stdout) == (0, "soak\n"), out
            sbx.files.write("/home/user/soak.txt", "kept")
            sbx.pause()
            again = Sandbox.connect(sbx.sandbox_id, **opts)
            assert again.files.read("/home/user/soak.txt") == "kept"
        finally:
            Sandbox.kill(sbx.sandbox_id, **opts)
        run.verdict = "full"

    def kernel(self, run: Run) -> None:
        root = Path(__file__).resolve().parents[1]
        expert = root / "services/verifier/kernel/tasks/softmax/expert.py"
        body = {"task": "softmax", "files": {"expert.py": expert.read_text()},
                "timing": {"trials": 3, "iterations": 1, "warmups": 1}}  # fmt: skip
        run.label = "softmax expert"
        with self.http("verifier") as ver:
            resp = ver.post("/verify/kernel", json=body)
            if resp.status_code != 202:
                run.verdict, run.detail = f"error:http_{resp.status_code}", resp.text[:300]
                return
            job = self._wait(ver, f"/jobs/{resp.json()['id']}")
        if job["status"] == "succeeded":
            ok = job["result"]["correct"] and not job["result"]["detectors"]
            run.verdict = "full" if ok else "BELOW_FULL"
            run.detail = f"reward {job['result'].get('reward')}"
        else:
            run.verdict = f"named:{(job.get('error') or {}).get('code', job['status'])}"

    def world(self, run: Run) -> None:
        n = next(self.counter)
        run.label = SCENARIOS[n % len(SCENARIOS)]
        with self.http("tools") as tools:
            made = tools.post("/worlds", json={"scenario": run.label, "seed": n})
            made.raise_for_status()
            wid = made.json()["id"]
            tools.get(f"/worlds/{wid}").raise_for_status()
            tools.post(f"/worlds/{wid}/reset").raise_for_status()
            tools.delete(f"/worlds/{wid}").raise_for_status()
        run.verdict = "full"

    def _wait(self, http: httpx.Client, path: str) -> dict:
        """Poll until terminal; the drain deadline (not this loop) bounds a run that hangs."""
        while True:
            body = http.get(path).json()
            if body["status"] in TERMINAL:
                return body
            time.sleep(1.0)

    def kinds(self) -> list[tuple[str, Callable[[Run], None]]]:
        kinds = [("episode", self.episode), ("sandbox", self.sandbox), ("episode", self.episode),
                 ("kernel", self.kernel), ("world", self.world)]  # fmt: skip
        if self.cli:
            kinds.append(("cli", lambda run: self.episode(run, "claude-code-cli")))
        return kinds

    def one(self, kind: str, body: Callable[[Run], None]) -> None:
        run = Run(kind=kind, label="", started=self.now())
        with self.lock:
            self.result.runs.append(run)
            self.in_flight += 1
        faults_before = len(self.result.faults)
        try:
            body(run)
        except Exception as exc:  # classified, never raised: the soak goes on
            hit = len(self.result.faults) > faults_before
            run.verdict = f"{'named:infra_fault' if hit else 'error'}:{type(exc).__name__}"
            run.detail = str(exc)[:300]
        finally:
            run.ended = self.now()
            with self.lock:
                self.in_flight -= 1

    # ---- faults and samples ----------------------------------------------------------------

    def fault(self, n: int) -> None:
        targets = ["orchestrator-worker", "verifier-worker", "sandbox", "qemu"]
        target = targets[n % len(targets)]
        if target == "qemu":
            qemus = [p for p in processes_mentioning(str(self.stack.data_dir)) if "qemu" in p]
            if not qemus:
                return
            pid = int(random.choice(qemus).split(":")[0])
            os.kill(pid, signal.SIGKILL)
            self.result.faults.append((self.now(), f"SIGKILL qemu {pid}"))
            return
        pid = self.stack.children().get(target)
        if pid:
            os.killpg(pid, signal.SIGKILL)
            self.result.faults.append((self.now(), f"SIGKILL {target} (group {pid})"))

    def sample(self) -> None:
        children = self.stack.children()
        rss, health = {}, {}
        for name in SERVICES:
            pids = [p for c, g in children.items() if c.split("-")[0] == name
                    for p in _pids_of_group(g)]  # fmt: skip
            rss[name] = _rss_mib(pids)
            t = time.monotonic()
            try:
                httpx.get(f"{self.stack.url(name)}/health/live", timeout=30)
                health[name] = (time.monotonic() - t) * 1000
            except httpx.HTTPError:
                health[name] = 30_000.0
        self.result.samples.append(
            Sample(self.now(), os.getloadavg()[0], self.in_flight, rss, health)
        )


def run_soak(minutes: float, concurrency: int, fault_every: float, drain_s: float,
             cli: bool, report: Path, data_dir: Path) -> SoakResult:  # fmt: skip
    result = SoakResult(minutes=minutes, concurrency=concurrency)
    shm_before = set(os.listdir("/dev/shm"))
    stack = Stack(data_dir)
    console.print(f"soak: starting k3stack up (data in {data_dir})")
    stack.start()
    soak = Soak(stack, result, cli)
    end = soak.t0 + minutes * 60
    kinds = itertools.cycle(soak.kinds())
    threads: list[threading.Thread] = []
    next_fault = soak.t0 + fault_every if fault_every > 0 else float("inf")
    next_sample, faults = 0.0, itertools.count()
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console) as bar:  # fmt: skip
        task = bar.add_task("soak", total=minutes * 60)
        while time.monotonic() < end:
            threads = [t for t in threads if t.is_alive()]
            while len(threads) < concurrency:
                kind, body = next(kinds)
                t = threading.Thread(target=soak.one, args=(kind, body), daemon=True)
                t.start()
                threads.append(t)
            if time.monotonic() >= next_fault:
                soak.fault(next(faults))
                next_fault += fault_every
            if time.monotonic() >= next_sample:
                soak.sample()
                next_sample = time.monotonic() + 5
            ended = [r for r in result.runs if r.verdict]
            bar.update(task, completed=min(minutes * 60, soak.now()),
                       description=f"soak: {len(ended)} ended, {soak.in_flight} in flight, "
                                   f"{len(result.faults)} faults")  # fmt: skip
            time.sleep(0.5)
        bar.update(task, description="soak: draining the runs in flight")
        drain_end = time.monotonic() + drain_s
        for t in threads:
            t.join(timeout=max(0.0, drain_end - time.monotonic()))
    soak.sample()
    _check(soak, stack, result, shm_before)
    code = stack.stop()
    if code != 0:
        result.violations.append(f"k3stack up exited {code} on Ctrl-C")
    time.sleep(2)
    left = processes_mentioning(str(data_dir))
    if left:
        result.violations.append(f"{len(left)} processes of the run outlived the stack: {left[:3]}")
    shm_left = sorted(set(os.listdir("/dev/shm")) - shm_before)
    if shm_left:
        result.violations.append(f"/dev/shm files left: {shm_left[:5]}")
    write_report(result, report)
    return result


def _check(soak: Soak, stack: Stack, result: SoakResult, shm_before: set[str]) -> None:
    runs = list(result.runs)
    stuck = [r for r in runs if not r.verdict]
    if stuck:
        result.violations.append(f"{len(stuck)} runs still in flight after the drain")
    below = [r for r in runs if r.verdict == "BELOW_FULL"]
    if below:
        result.violations.append(f"{len(below)} runs succeeded below full score: "
                                 f"{[(r.kind, r.label, r.detail) for r in below[:3]]}")  # fmt: skip
    errors = [r for r in runs if r.verdict.startswith("error")]
    if errors:
        result.violations.append(f"{len(errors)} runs failed unnamed: "
                                 f"{[(r.kind, r.verdict, r.detail[:80]) for r in errors[:3]]}")  # fmt: skip
    infra = [r for r in runs if r.verdict.startswith("named")]
    if runs and len(infra) > 0.05 * len(runs):
        result.violations.append(f"named failures are {len(infra)}/{len(runs)} runs (> 5%)")
    with httpx.Client(base_url=stack.url("orchestrator"), timeout=60) as orch:
        eps = orch.get("/episodes", params={"limit": 1000}).json()["episodes"]
    open_eps = [e["id"] for e in eps if e["status"] not in TERMINAL]
    if open_eps:
        result.violations.append(f"{len(open_eps)} episodes left queued/running: {open_eps[:3]}")
    with httpx.Client(base_url=stack.url("sandbox"), timeout=60) as sbx:
        left = sbx.get("/sandboxes").json()
    if left:
        result.violations.append(
            f"{len(left)} sandboxes left: {[s.get('sandboxID') for s in left][:3]}"
        )
    if result.minutes >= 10:
        after5 = next((s for s in result.samples if s.t >= 300), None)
        last = result.samples[-1]
        if after5:
            for name, mib in last.rss_mib.items():
                base = after5.rss_mib.get(name, 0.0)
                if base and mib > 1.5 * base:
                    result.violations.append(f"{name} RSS grew {base:.0f} -> {mib:.0f} MiB")


app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command()
def main(
    minutes: Annotated[float, typer.Option(help="How long work is submitted.")] = 3.0,
    concurrency: Annotated[int, typer.Option(help="Pieces of work in flight at once.")] = 2,
    fault_every: Annotated[float, typer.Option(help="Seconds between faults; 0: none.")] = 60.0,
    drain_s: Annotated[float, typer.Option(help="Bound on the runs in flight at the end.")] = 900.0,
    cli: Annotated[bool, typer.Option(help="Add real-CLI episodes (claude-code-cli).")] = False,
    report: Annotated[Path, typer.Option(help="The HTML report.")] = Path("soak-report.html"),
    data_dir: Annotated[
        Path | None, typer.Option(help="Data dir (default: a new temp dir).")
    ] = None,
) -> None:
    """Run the soak; exit 1 when any check fails."""
    ddir = data_dir or Path(tempfile.mkdtemp(prefix="k3stack-soak-"))
    result = run_soak(minutes, concurrency, fault_every, drain_s, cli, report, ddir)
    table = Table(title=f"soak: {minutes:g} min, concurrency {concurrency}, "
                        f"{len(result.faults)} faults")  # fmt: skip
    for col in ("kind", "runs", "full", "named failure", "below full", "error"):
        table.add_column(col)
    for row in outcome_table(result.runs):
        table.add_row(*map(str, row))
    console.print(table)
    for v in result.violations:
        console.print(f"[red]FAIL[/] {v}")
    console.print(f"report: {report.resolve()}")
    raise typer.Exit(1 if result.violations else 0)


if __name__ == "__main__":
    app()
