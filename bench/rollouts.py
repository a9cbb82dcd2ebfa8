"""Rollout throughput and costs, over the real tools and sandbox services (process runtime) and
the scripted token-id endpoint the tests use (a stand-in for a policy: it makes the model's
time zero, so the figures are the platform's own overhead).

Prints: samples per minute with 1 and 2 workers (worker threads running the sample job
in-process, each one claiming samples like a Celery worker; on this 2-core machine), the
pause + resume overhead per paused sample (world snapshot, file digest, sandbox pause; and
back), and the setup time of K forked starts against K independent setups.

    .venv/bin/python bench/rollouts.py [--k 4] [--turns 3]
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _service(name: str, data: Path, **env_extra: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env.update(K3STACK_DATA_DIR=str(data), K3STACK_ENV_FILE="/nonexistent/.env",
               K3STACK_AUTH_ENABLED="false", PYTHONPATH=str(REPO), **env_extra)  # fmt: skip
    data.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", f"services.{name}", "--port", str(port)],
                            env=env, cwd=REPO, stdout=(data / "log").open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    _stop(proc)
    raise RuntimeError(f"{name} did not start; see {data / 'log'}")


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def _workers(db, svc, ids: list[str], n: int) -> float:  # type: ignore[no-untyped-def]
    from services.orchestrator.rollouts.tasks import run_inline

    q: queue.Queue[str] = queue.Queue()
    for i in ids:
        q.put(i)

    def work() -> None:
        while True:
            try:
                sid = q.get_nowait()
            except queue.Empty:
                return
            run_inline(db, svc, sid)

    began = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - began


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    args = ap.parse_args()
    from services.orchestrator.db import open_database
    from services.orchestrator.episode.runner import Services
    from services.orchestrator.rollouts import sample as sample_mod
    from services.orchestrator.rollouts.schema import RolloutCreate, RolloutIterate
    from services.orchestrator.rollouts.service import create_rollout, iterate, rollout_view
    from shared.clients import ModelClient, SandboxClient, ToolsClient
    from shared.settings import get_settings
    from tests.helpers.asgi import serve
    from tests.orchestrator.rollout_endpoint import endpoint

    tmp = Path(tempfile.mkdtemp(prefix="bench-rollouts-"))
    tools, tools_url = _service("tools", tmp / "tools")
    sandbox, sandbox_url = _service("sandbox", tmp / "sandbox", K3STACK_SANDBOX__RUNTIME="process")
    try:
        db = open_database(f"sqlite:///{tmp}/orchestrator.db")
        db.migrate()
        svc = Services(tools=ToolsClient(tools_url, timeout=120), settings=get_settings(),
                       sandbox=SandboxClient(sandbox_url, timeout=120),
                       model=ModelClient("http://127.0.0.1:9", retries=0))  # fmt: skip
        task = {"scenario": "empty", "sandbox_template": "busybox",
                "instruction": f"Take notes. turns={args.turns}"}  # fmt: skip
        with serve(endpoint()) as url:

            def batch(lam: float, tasks: list | None = None) -> tuple[str, list[str]]:
                ids: list[str] = []
                body = RolloutCreate.model_validate({
                    "tasks": tasks or [task, task], "samples_per_task": args.k, "lam": lam,
                    "policy": {"base_url": f"{url}/v1", "version": "v1", "temperature": 0},
                })  # fmt: skip
                return create_rollout(db, body, ids.append, "rollouts"), ids

            for n in (1, 2):
                _, ids = batch(1.0)
                wall = _workers(db, svc, ids, n)
                print(f"{n} worker(s): {len(ids)} samples x {args.turns} turns in {wall:.1f} s"
                      f" = {60 * len(ids) / wall:.1f} samples/min")  # fmt: skip

            timings: dict[str, list[float]] = {"pause": [], "resume": []}
            for name in ("_pause", "_resume"):
                orig = getattr(sample_mod.SampleRunner, name)

                def timed(self, *a, _orig=orig, _key=name[1:]):  # type: ignore[no-untyped-def]
                    t0 = time.monotonic()
                    try:
                        return _orig(self, *a)
                    finally:
                        timings[_key].append(time.monotonic() - t0)

                setattr(sample_mod.SampleRunner, name, timed)
            short = {**task, "instruction": "Say done. turns=1"}
            long = {**task, "instruction": f"Take notes. turns={4 * args.turns}"}
            rid, ids = batch(0.5, [short, long])  # every sample running at once: 8 threads
            _workers(db, svc, ids, len(ids))
            paused = rollout_view(db, rid).counts.get("paused", 0)
            resumed: list[str] = []
            iterate(db, rid, RolloutIterate.model_validate(
                {"policy": {"base_url": f"{url}/v1", "version": "v2", "temperature": 0},
                 "lam": 1.0}), resumed.append)  # fmt: skip
            _workers(db, svc, resumed, len(resumed))
            p, r = timings["pause"], timings["resume"]
            if p and r:
                print(f"pause/resume: {paused} of {len(ids)} samples paused (λ=0.5); pause "
                      f"{1000 * sum(p) / len(p):.0f} ms + resume {1000 * sum(r) / len(r):.0f} ms"
                      " per sample")  # fmt: skip
            else:
                print(f"pause/resume: none paused ({paused}); every sample finished first")

        k = args.k
        t0 = time.monotonic()
        made = []
        for _ in range(k):
            made.append((svc.tools.create_world("empty").id,
                         svc.sandbox.create("busybox").sandboxID))  # fmt: skip
        independent = time.monotonic() - t0
        t0 = time.monotonic()
        base_w, base_s = svc.tools.create_world("empty").id, svc.sandbox.create("busybox").sandboxID
        for _ in range(k):
            made.append((svc.tools.fork(base_w).id,
                         svc.sandbox.fork(base_s, count=1, memory=False)[0].sandbox.sandboxID))  # fmt: skip
        forked = time.monotonic() - t0
        print(
            f"setup of K={k}: {k} independent setups {independent * 1000:.0f} ms, one setup + "
            f"{k} forks {forked * 1000:.0f} ms (saved {(independent - forked) * 1000:.0f} ms)"
        )
        for w, s in made + [(base_w, base_s)]:
            svc.tools.delete_world(w)
            svc.sandbox.kill(s)
    finally:
        _stop(tools)
        _stop(sandbox)


if __name__ == "__main__":
    main()
