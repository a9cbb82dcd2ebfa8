"""Rollout throughput and costs, over the real tools and sandbox services (process runtime) and
the scripted token-id endpoint the tests use (a stand-in for a policy: it makes the model's
time zero, so the figures are the platform's own overhead).

Prints: samples per minute with 1 and 2 workers (worker threads running the sample job
in-process, each one claiming samples like a Celery worker; on this 2-core machine); the
samples paused at λ = 0.5 and resumed by the next iteration, with the pause + resume overhead
per sample (world snapshot, file digest, sandbox pause; and back); the samples a policy-version
bump paused mid-run and resumed under the new version; and the setup time of K forked starts
against K independent setups.

``--policy-url`` runs the samples on a model service instead (e.g. ``k3stack up``'s,
``http://127.0.0.1:8000/v1``): every turn a tool call (``tool_choice: required``), ``--turns``
model calls per sample; the figures then include the model's time.

    .venv/bin/python bench/rollouts.py [--k 4] [--turns 3] [--policy-url URL]
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

from shared.until import until  # noqa: E402 - after the path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The tools service wants its admin key in every mode (POST /worlds is 403 without it).
TOOLS_KEY = "bench-rollouts-tools-key"


def _service(name: str, data: Path, **env_extra: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env.update(K3STACK_DATA_DIR=str(data), K3STACK_ENV_FILE="/nonexistent/.env",
               K3STACK_AUTH_ENABLED="false", PYTHONPATH=str(REPO),
               K3STACK_TOOLS__API_KEY=TOOLS_KEY, **env_extra)  # fmt: skip
    data.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", f"services.{name}", "--port", str(port)],
                            env=env, cwd=REPO, stdout=(data / "log").open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    healthy = until(lambda: httpx.get(f"{url}/health", timeout=2).status_code == 200, 180, 0.3,
                    errors=(httpx.HTTPError,))  # fmt: skip
    if healthy:
        return proc, url
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


def _in_background(db, svc, ids: list[str]) -> list[threading.Thread]:  # type: ignore[no-untyped-def]
    from services.orchestrator.rollouts.tasks import run_inline

    threads = [threading.Thread(target=run_inline, args=(db, svc, i)) for i in ids]
    for t in threads:
        t.start()
    return threads


def _steps(db, rid: str) -> list[int]:  # type: ignore[no-untyped-def]
    from services.orchestrator.rollouts.models import SampleRow

    with db.session() as s:
        rows = s.query(SampleRow).filter_by(rollout_id=rid).all()
        return [(r.state or {}).get("step", 0) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--policy-url", default=None,
                    help="A model service's /v1 (default: the scripted zero-time endpoint).")  # fmt: skip
    args = ap.parse_args()
    os.environ.setdefault("K3STACK_ENV_FILE", "/nonexistent/.env")
    os.environ["K3STACK_TOOLS__API_KEY"] = TOOLS_KEY  # the in-process runner's tools client
    from services.orchestrator.db import open_database
    from services.orchestrator.episode.runner import Services
    from services.orchestrator.rollouts import sample as sample_mod
    from services.orchestrator.rollouts.models import RolloutRow, SampleRow
    from services.orchestrator.rollouts.schema import RolloutCreate, RolloutIterate
    from services.orchestrator.rollouts.service import create_rollout, iterate, rollout_view
    from shared.clients import ModelClient, SandboxClient, ToolsClient
    from shared.settings import get_settings
    from tests.helpers.asgi import serve
    from tests.orchestrator.rollout_endpoint import endpoint

    get_settings.cache_clear()
    tmp = Path(tempfile.mkdtemp(prefix="bench-rollouts-"))
    tools, tools_url = _service("tools", tmp / "tools")
    sandbox, sandbox_url = _service("sandbox", tmp / "sandbox", K3STACK_SANDBOX__RUNTIME="process")
    real = args.policy_url is not None
    try:
        db = open_database(f"sqlite:///{tmp}/orchestrator.db")
        db.migrate()
        settings = get_settings()
        svc = Services(tools=ToolsClient.from_settings(settings, base_url=tools_url, timeout=120),
                       settings=settings, sandbox=SandboxClient(sandbox_url, timeout=120),
                       model=ModelClient("http://127.0.0.1:9", retries=0))  # fmt: skip
        task = {"scenario": "empty", "sandbox_template": "busybox",
                "instruction": f"Take notes. turns={args.turns}"}  # fmt: skip
        with serve(endpoint()) as url:
            policy_url = args.policy_url or f"{url}/v1"

            def policy(version: str) -> dict:
                extra = {"tool_choice": "required", "temperature": 1.0, "seed": 5} if real else {}
                return {"base_url": policy_url, "version": version, "temperature": 0, **extra}

            def batch(lam: float, tasks: list | None = None, turns: int = args.turns
                      ) -> tuple[str, list[str]]:  # fmt: skip
                ids: list[str] = []
                body = RolloutCreate.model_validate({
                    "tasks": tasks or [task, task], "samples_per_task": args.k, "lam": lam,
                    "policy": policy("v1"), "effort": "low",
                    "budgets": {"max_steps": turns, "max_output_tokens": 64} if real else {},
                })  # fmt: skip
                return create_rollout(db, body, ids.append, "rollouts"), ids

            for n in (1, 2):
                rid, ids = batch(1.0)
                wall = _workers(db, svc, ids, n)
                done = rollout_view(db, rid).counts.get("finished", 0)
                print(f"{n} worker(s): {done} of {len(ids)} samples x {args.turns} turns finished"
                      f" in {wall:.1f} s = {60 * done / wall:.1f} samples/min")  # fmt: skip

            timings: dict[str, list[float]] = {"pause": [], "resume": []}
            for name in ("_pause", "_resume"):
                orig = getattr(sample_mod.SampleDriver, name)

                def timed(self, *a, _orig=orig, _key=name[1:]):  # type: ignore[no-untyped-def]
                    t0 = time.monotonic()
                    try:
                        return _orig(self, *a)
                    finally:
                        timings[_key].append(time.monotonic() - t0)

                setattr(sample_mod.SampleDriver, name, timed)
            short = {**task, "instruction": "Say done. turns=1"}
            long = {**task, "instruction": f"Take notes. turns={4 * args.turns}"}
            if not real:  # λ: the short half finishes, the long half pauses
                rid, ids = batch(0.5, [short, long])  # every sample running at once
                _workers(db, svc, ids, len(ids))
                paused = rollout_view(db, rid).counts.get("paused", 0)
                resumed: list[str] = []
                iterate(db, rid, RolloutIterate.model_validate(
                    {"policy": policy("v2"), "lam": 1.0}), resumed.append)  # fmt: skip
                _workers(db, svc, resumed, len(resumed))
                counts = rollout_view(db, rid).counts
                p, r = timings["pause"], timings["resume"]
                print(f"λ=0.5: {paused} of {len(ids)} samples paused, {len(resumed)} resumed "
                      f"under v2, final {counts}; pause "
                      f"{1000 * sum(p) / max(1, len(p)):.0f} ms + resume "
                      f"{1000 * sum(r) / max(1, len(r)):.0f} ms per sample")  # fmt: skip

            # A version bump while every sample runs: each pauses at its next tick, resumes on v2.
            rid, ids = batch(1.0, [long], turns=2 * args.turns)
            threads = _in_background(db, svc, ids)
            deadline = time.monotonic() + 600
            while min(_steps(db, rid)) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            t0 = time.monotonic()
            iterate(db, rid, RolloutIterate.model_validate({"policy": policy("v2")}),
                    lambda _i: None)  # fmt: skip
            for t in threads:
                t.join()
            with db.session() as s:
                swaps = sum(int((r.paused or {}).get("swaps", 0)) for r in
                            s.query(SampleRow).filter_by(rollout_id=rid))  # fmt: skip
                resumed_n = s.get(RolloutRow, rid).history[-1]["resumed"]
            view = rollout_view(db, rid)
            on_v2 = sum(1 for v in view.samples if v.versions and v.versions[-1].version == "v2")
            print(f"version bump mid-run: {swaps} of {len(ids)} samples paused at a tick and "
                  f"{resumed_n} resumed on v2 ({on_v2} ended on v2), final {view.counts}, "
                  f"{time.monotonic() - t0:.1f} s after the bump")  # fmt: skip

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
