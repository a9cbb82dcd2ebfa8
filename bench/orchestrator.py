"""Orchestrator overhead and throughput.

0. A scenario episode (oracle policy, the real tools service, the model service's tokenizer
   counting the context): the orchestrator's own time per tick (the tick and its commit, less
   the time spent in HTTP requests to the services; goal <= 10 ms median) beside the services'.
1. Per-step orchestration overhead (goal < 10 ms): an episode driven by a zero-latency scripted
   model whose every turn calls one local tool (TodoWrite), run by the real EpisodeRunner on a
   SQLite file — so each step costs the loop, argument validation, the tool, token counting and
   the two commits (model turn, observation) that make it resumable. Baseline in the same run:
   the bare loop with nothing persisted, printed as a ratio.
2. Episodes per minute with 1 and 2 Celery workers: oracle episodes of a real scenario against
   a real tools service (processes started here, stopped at the end), embedded SQLite broker;
   after ``--limit-s`` the episodes finished so far count, so the figure comes in bounded time.

    python bench/orchestrator.py [--steps 200] [--episodes 6] [--scenario finance_expenses]
                                 [--scenario-only | --throughput-only] [--limit-s 300]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# the tools service wants an admin key for its management routes; the bench's services share one
TOOLS_KEY = "tools-admin-key-orchestrator-bench"


def _turn(view):  # type: ignore[no-untyped-def]
    from services.orchestrator.episode.policy import Turn

    n = view.step
    todo = [{"content": f"item {n}", "status": "in_progress", "activeForm": f"doing {n}"}]
    return Turn(
        tool_calls=[{"id": f"c{n}", "name": "TodoWrite", "arguments": json.dumps({"todos": todo})}],
        usage={"prompt_tokens": 1, "completion_tokens": 1},
    )


def per_step(steps: int, tmp: Path) -> tuple[float, float]:
    from services.orchestrator.context.compaction import Compactor
    from services.orchestrator.context.tokens import ApproxTokenCounter
    from services.orchestrator.db import open_database
    from services.orchestrator.episode.loop import Loop, MemoryJournal, Runtime
    from services.orchestrator.episode.policy import ScriptedPolicy
    from services.orchestrator.episode.runner import EpisodeRunner, Services
    from services.orchestrator.episode.schema import EpisodeCreate
    from services.orchestrator.episode.service import create_episode
    from services.orchestrator.episode.state import initial_state
    from services.orchestrator.episode.whitebox import LoopDriver
    from services.orchestrator.harness.config import load_harness
    from services.orchestrator.tools.base import ToolSet
    from services.orchestrator.tools.builtin import CATALOGUE, ToolContext
    from shared.settings import get_settings

    policy = ScriptedPolicy(_turn)
    # the bare loop: nothing persisted
    harness = load_harness("claude-code")
    harness.budgets.max_steps = steps
    harness.budgets.steps_per_day = steps + 1
    tools = ToolSet()
    for key in harness.tools:
        tools.add(CATALOGUE[key])
    rt = Runtime(harness=harness, tools=tools, ctx=ToolContext(), policy=policy,
                 compactor=Compactor(harness.context, harness.context.window,
                                     ApproxTokenCounter(), policy.summarize, tools.specs()),
                 journal=MemoryJournal())  # fmt: skip
    state = initial_state("bench", "go")
    loop = Loop(rt, state, lambda kind, body: None)
    t = time.perf_counter()
    while not loop.done:
        loop.tick()
    bare_ms = (time.perf_counter() - t) * 1000 / steps

    db = open_database(f"sqlite:///{tmp}/bench.db")
    db.migrate()
    svc = Services(tools=None, sandbox=None, model=None, settings=get_settings(), objects=None)
    body = EpisodeCreate.model_validate(
        {"task": {"instruction": "go"}, "harness": "claude-code",
         "budgets": {"max_steps": steps, "steps_per_day": steps + 1}}
    )  # fmt: skip

    def timed(n: int) -> float:
        small = body.model_copy(deep=True)
        small.budgets.max_steps = n
        episode_id = create_episode(db, small, lambda _id: None)
        runner = EpisodeRunner(db, svc, episode_id, policy=policy)
        real_counter = LoopDriver.token_counter
        LoopDriver.token_counter = lambda self, request: ApproxTokenCounter()  # type: ignore[method-assign] # no model service here
        try:
            t = time.perf_counter()
            runner.run()
            return (time.perf_counter() - t) * 1000 / n
        finally:
            LoopDriver.token_counter = real_counter  # type: ignore[method-assign]

    timed(5)  # warm-up: imports, first connections
    full_ms = timed(steps)
    db.close()
    return bare_ms, full_ms


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, cwd=REPO, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def _wait_text(log: Path, text: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while text not in (log.read_text() if log.exists() else ""):
        if time.monotonic() > deadline:
            raise SystemExit(f"{log}: {text!r} not seen:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)


def throughput(
    workers: int, episodes: int, scenario: str, tmp: Path, limit_s: float
) -> tuple[float, int, float]:
    """Episodes per minute with ``workers`` workers: the finished ones over the time taken,
    (rate, finished, seconds); after ``limit_s`` the ones finished so far count."""
    from services.orchestrator.db import open_database
    from services.orchestrator.episode.models import EpisodeRow
    from services.orchestrator.episode.schema import EpisodeCreate
    from services.orchestrator.episode.service import create_episode
    from shared.queue import make_celery, worker_argv
    from shared.settings import load_settings

    run = tmp / f"w{workers}"
    run.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    port = _free_port()
    env = {**base, "PYTHONPATH": str(REPO), "K3STACK_ENV_FILE": "/nonexistent",
           "K3STACK_DATA_DIR": str(run), "K3STACK_AUTH_ENABLED": "false",
           "K3STACK_DATABASE_URL": f"sqlite:///{run}/orch.db",
           "K3STACK_BROKER_URL": f"sqla+sqlite:///{run}/broker.db",
           "K3STACK_RESULT_BACKEND": f"db+sqlite:///{run}/results.db",
           "K3STACK_TOOLS__URL": f"http://127.0.0.1:{port}",
           "K3STACK_MODEL__URL": "http://127.0.0.1:9", "OMP_NUM_THREADS": "1",
           "K3STACK_TOOLS__API_KEY": TOOLS_KEY}  # fmt: skip
    tools_env = {**env, "K3STACK_DATA_DIR": str(run / "tools"),
                 "K3STACK_DATABASE_URL": f"sqlite:///{run}/tools.db"}  # fmt: skip
    procs = [_start([sys.executable, "-m", "services.tools", "--port", str(port)], tools_env,
                    run / "tools.log")]  # fmt: skip
    try:
        _wait_text(run / "tools.log", "Application startup complete")
        for i in range(workers):
            argv = [sys.executable, *worker_argv("orchestrator", 1, "solo")]
            argv[argv.index("-n") + 1] = f"orchestrator{i}@%h"
            procs.append(_start(argv, env, run / f"worker{i}.log"))
        for i in range(workers):
            _wait_text(run / f"worker{i}.log", " ready.")
        db = open_database(env["K3STACK_DATABASE_URL"])
        db.migrate()
        settings = load_settings(broker_url=env["K3STACK_BROKER_URL"],
                                 result_backend=env["K3STACK_RESULT_BACKEND"])  # fmt: skip
        app = make_celery("orchestrator", settings)
        body = EpisodeCreate.model_validate(
            {"task": {"scenario": scenario}, "harness": "claude-code", "policy": {"kind": "oracle"}}
        )
        t = time.perf_counter()
        ids = [
            create_episode(
                db,
                body,
                lambda i: app.send_task("orchestrator.run_episode", args=[i], queue="orchestrator"),
            )  # fmt: skip
            for _ in range(episodes)
        ]
        finished = ("succeeded", "failed", "cancelled")
        while True:
            with db.session() as s:
                done = [s.get(EpisodeRow, i).status for i in ids]
            elapsed = time.perf_counter() - t
            if all(d in finished for d in done) or elapsed > limit_s:
                break
            time.sleep(0.2)
        if any(d in finished and d != "succeeded" for d in done):
            raise SystemExit(f"episodes did not all succeed: {done}")
        db.close()
        n = done.count("succeeded")
        return n / elapsed * 60, n, elapsed
    finally:
        for p in reversed(procs):
            _stop(p)


def _service(name: str, run: Path, extra: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """Start the real ``name`` service on a free port; (process, url)."""
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env = {**base, "PYTHONPATH": str(REPO), "K3STACK_ENV_FILE": "/nonexistent",
           "K3STACK_DATA_DIR": str(run / name), "K3STACK_AUTH_ENABLED": "false",
           "OMP_NUM_THREADS": "1", "K3STACK_TOOLS__API_KEY": TOOLS_KEY,
           **(extra or {})}  # fmt: skip
    log = run / f"{name}.log"
    proc = _start([sys.executable, "-m", f"services.{name}", "--port", str(port)], env, log)
    _wait_text(log, "Application startup complete")
    return proc, f"http://127.0.0.1:{port}"


def scenario_step(scenario: str, tmp: Path) -> dict[str, float]:
    """One oracle episode of a real scenario (real tools service, the model service's tokenizer
    counting the context), run by the EpisodeRunner on SQLite. Each tick (loop step + its
    commit) is timed, and so is every HTTP request it makes: own time = tick - requests."""
    import statistics

    import httpx

    from services.orchestrator.db import open_database
    from services.orchestrator.episode.loop import Loop
    from services.orchestrator.episode.models import EpisodeRow
    from services.orchestrator.episode.recorder import EpisodeRecorder
    from services.orchestrator.episode.runner import EpisodeRunner, Services
    from services.orchestrator.episode.schema import EpisodeCreate
    from services.orchestrator.episode.service import create_episode
    from services.orchestrator.tools.mcp import WorldMCP
    from shared.clients import ModelClient, SandboxClient, ToolsClient
    from shared.settings import get_settings

    run = tmp / "scenario"
    run.mkdir()
    procs = []
    try:
        tools_proc, tools_url = _service("tools", run)
        procs.append(tools_proc)
        model_proc, model_url = _service("model", run)
        procs.append(model_proc)
        db = open_database(f"sqlite:///{run}/orch.db")
        db.migrate()
        svc = Services(tools=ToolsClient(tools_url, timeout=120), model=ModelClient(model_url),
                       sandbox=SandboxClient("http://127.0.0.1:9"), settings=get_settings())  # fmt: skip
        body = EpisodeCreate.model_validate(
            {"task": {"scenario": scenario}, "harness": "claude-code", "policy": {"kind": "oracle"}}
        )
        http = {"s": 0.0, "n": 0, "tokenize": 0, "tokenize_s": 0.0, "mcp": 0, "mcp_s": 0.0}
        real_request, real_tick = httpx.Client.request, Loop.tick
        real_mcp = WorldMCP._session
        real_persist = EpisodeRecorder.persist
        ticks: list[tuple[float, float]] = []
        current = {"t": 0.0, "http": 0.0}

        def request(self, method, url, **kw):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return real_request(self, method, url, **kw)
            finally:
                took = time.perf_counter() - t
                http["s"] += took
                http["n"] += 1
                if str(url).endswith("/v1/tokenize"):
                    http["tokenize"] += 1
                    http["tokenize_s"] += took

        def mcp_session(self, app, work):  # type: ignore[no-untyped-def]
            """A world tool's MCP request (over httpx2, which the request patch does not see;
            the session's handshake at its first) counts as the services' time, SDK
            included."""
            t = time.perf_counter()
            try:
                return real_mcp(self, app, work)
            finally:
                took = time.perf_counter() - t
                http["s"] += took
                http["mcp"] += 1
                http["mcp_s"] += took

        def tick(self):  # type: ignore[no-untyped-def]
            current["t"], current["http"] = time.perf_counter(), http["s"]
            return real_tick(self)

        def persist(self, state):  # type: ignore[no-untyped-def]
            out = real_persist(self, state)
            if current["t"]:
                wall = time.perf_counter() - current["t"]
                ticks.append((wall, http["s"] - current["http"]))
                current["t"] = 0.0
            return out

        httpx.Client.request, Loop.tick = request, tick  # type: ignore[method-assign]
        WorldMCP._session = mcp_session  # type: ignore[method-assign]
        EpisodeRecorder.persist = persist  # type: ignore[method-assign]
        try:
            episode_id = create_episode(db, body, lambda _id: None)
            t = time.perf_counter()
            EpisodeRunner(db, svc, episode_id).run()
            elapsed = time.perf_counter() - t
        finally:
            httpx.Client.request, Loop.tick = real_request, real_tick  # type: ignore[method-assign]
            WorldMCP._session = real_mcp  # type: ignore[method-assign]
            EpisodeRecorder.persist = real_persist  # type: ignore[method-assign]
        with db.session() as s:
            row = s.get(EpisodeRow, episode_id)
            status, steps, counter = row.status, row.state["step"], row.state.get("exit_reason")
        if status != "succeeded":
            raise SystemExit(f"scenario episode {status}: {counter}")
        db.close()
        own = [(w - h) * 1000 for w, h in ticks]
        services_ms = [h * 1000 for _, h in ticks]
        return {
            "ticks": len(ticks), "steps": steps, "episode_s": elapsed,
            "own_median": statistics.median(own), "own_p90": sorted(own)[int(len(own) * 0.9)],
            "services_median": statistics.median(services_ms),
            "services_p90": sorted(services_ms)[int(len(services_ms) * 0.9)],
            "services_s": sum(services_ms) / 1000, "requests": http["n"],
            "tokenize": http["tokenize"], "tokenize_s": http["tokenize_s"],
            "mcp": http["mcp"], "mcp_s": http["mcp_s"],
        }  # fmt: skip
    finally:
        for p in reversed(procs):
            _stop(p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--scenario", default="finance_expenses")
    parser.add_argument("--scenario-only", action="store_true", help="Only the scenario episode.")
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="Only the episodes per minute with 1 and 2 workers.",
    )
    parser.add_argument("--limit-s", type=float, default=300.0,
                        help="Per worker count: stop waiting after this long and count the "
                        "episodes finished by then (default 300).")  # fmt: skip
    args = parser.parse_args()
    os.environ.setdefault("K3STACK_ENV_FILE", "/nonexistent")
    os.environ["K3STACK_TOOLS__API_KEY"] = TOOLS_KEY  # the in-process runner's tools client
    with tempfile.TemporaryDirectory(prefix="k3-bench-orch-") as tmp:
        os.environ["K3STACK_DATA_DIR"] = tmp
        if not args.throughput_only:
            scenario_report(args.scenario, Path(tmp))
        if args.scenario_only:
            return
        if not args.throughput_only:
            bare, full = per_step(args.steps, Path(tmp))
            print(f"per-step overhead, zero-latency model ({args.steps} steps):")
            print(f"  bare loop (nothing persisted)      {bare:7.2f} ms/step")
            print(f"  EpisodeRunner (SQLite, 1 commit)   {full:7.2f} ms/step  "
                  f"({full / bare:.1f}x the bare loop; goal < 10 ms)")  # fmt: skip
        rates = {}
        for workers in (1, 2):
            rate, n, took = throughput(workers, args.episodes, args.scenario, Path(tmp),
                                       args.limit_s)  # fmt: skip
            rates[workers] = rate
            print(f"episodes/min, {workers} worker(s), oracle {args.scenario}: {rate:6.1f} "
                  f"({n} of {args.episodes} finished in {took:.0f} s)")  # fmt: skip
        if rates[1]:
            print(f"  2 workers / 1 worker: {rates[2] / rates[1]:.2f}x (on {os.cpu_count()} "
                  f"cores, load average {os.getloadavg()[0]:.1f})")  # fmt: skip


def scenario_report(scenario: str, tmp: Path) -> None:
    sc = scenario_step(scenario, tmp)
    print(
        f"scenario episode, oracle + the model's tokenizer ({scenario}, claude-code): "
        f"{sc['steps']} model steps, {sc['ticks']} ticks in {sc['episode_s']:.1f} s "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    print(
        f"  orchestrator's own time per tick   {sc['own_median']:7.2f} ms median "
        f"(p90 {sc['own_p90']:.2f}; goal <= 10 ms)"
    )
    print(f"  services' time per tick            {sc['services_median']:7.2f} ms median "
          f"(p90 {sc['services_p90']:.2f}; {sc['services_s']:.1f} s in all)")  # fmt: skip
    print(f"    {sc['requests']} HTTP requests, {sc['tokenize']} of them /v1/tokenize "
          f"({sc['tokenize_s']:.1f} s); {sc['mcp']} MCP requests (world tools, "
          f"one session per app for the run; {sc['mcp_s']:.1f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
