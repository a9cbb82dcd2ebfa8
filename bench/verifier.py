"""Wall time per verification job kind, and the verifier's own overhead per kernel trial.

    .venv/bin/python bench/verifier.py [--tasks softmax,kda_step] [--skip-world] [--skip-web]

Every job goes through the verifier's API (in process, Celery eager: the job body runs in the
request, so the wall time is the job's). Kernel jobs verify each task's expert with the task's
own timing; for them it also prints where the verifier's time goes: the measurer's own work
per call (writing inputs into shared memory, reading outputs back, the clean-up round trip),
and the checks of each output in the measurer (reference + fp64 oracle recomputed, bytes
compared), beside the reference's and the candidate's charged times. The judge runs against a
scripted OpenAI-compatible endpoint (protocol overhead, not model latency); the world job
against the real tools service on a free port (a library scenario, deterministic checks). Web
jobs verify the test suite's correct app (a node server started by ``npm start``) against the
real sandbox service on a free port, once per runtime it has of ``--web-runtimes`` (microvm:
the Debian image; process: the fallback); ``in sandbox`` is the time from sandbox create to its
kill.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _serve(app):  # noqa: ANN001, ANN202
    import uvicorn

    from tests.helpers.servers import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="softmax,kda_step,matmul_bias_gelu")
    ap.add_argument("--skip-world", action="store_true")
    ap.add_argument("--skip-web", action="store_true")
    ap.add_argument(
        "--web-runtimes", default="microvm,process", help="runtimes to try, if available"
    )
    ap.add_argument("--web-jobs", type=int, default=1, help="web jobs in a row per runtime")
    ap.add_argument("--load", type=int, default=0, help="busy processes to run meanwhile (cores)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="k3s-bench-verifier-")
    os.environ.update(
        K3STACK_DATA_DIR=tmp,
        K3STACK_AUTH_ENABLED="false",
        K3STACK_CELERY_EAGER="true",
        K3STACK_LOG_LEVEL="WARNING",
    )
    os.environ.pop("K3STACK_DATABASE_URL", None)
    from fastapi.testclient import TestClient

    from services.verifier.kernel.spec import TASKS_DIR
    from shared.settings import get_settings
    from tests.verifier.scripted_llm import scripted_llm

    tools_server = None
    if not args.skip_world:
        from services.tools.app import create_app as tools_app

        get_settings.cache_clear()
        tools_server, tools_url = _serve(tools_app())
        os.environ["K3STACK_TOOLS__URL"] = tools_url
    sandbox_server, web_runtimes = None, []
    if not args.skip_web:
        from services.sandbox.app import create_app as sandbox_app
        from shared.settings import load_settings

        sbx = load_settings(sandbox={"runtime": "auto", "reaper_interval_s": 3600})
        sandbox_server, sandbox_url = _serve(sandbox_app(sbx, background=False))
        os.environ["K3STACK_SANDBOX__URL"] = sandbox_url
        infos = httpx.get(f"{sandbox_url}/runtimes").json()
        web_runtimes = [
            r["name"] for r in infos if r["name"] in args.web_runtimes.split(",") and r["available"]
        ]

    def judge_reply(system: str, user: str) -> str:
        if "grading rubric" in system:
            return (
                '{"criteria": [{"name": "correct", "weight": 2}, {"name": "clear", "weight": 1}]}'
            )
        if "Grade the candidate" in system:
            return '{"scores": {"correct": 7, "clear": 6}}'
        return '{"winner": "A"}'

    with scripted_llm(judge_reply) as llm:
        os.environ["K3STACK_LLM_URL"] = llm.url
        os.environ["K3STACK_VERIFIER__JUDGE_MODEL"] = "scripted-judge"
        get_settings.cache_clear()
        from services.verifier.app import create_app

        with TestClient(create_app()) as c:
            rows: list[tuple[str, float, str]] = []

            def job(path: str, body: dict) -> tuple[dict, float]:
                t0 = time.perf_counter()
                r = c.post(path, json=body)
                assert r.status_code == 202, r.text
                j = c.get(f"/jobs/{r.json()['id']}").json()
                assert j["status"] == "succeeded", j
                return j["result"], time.perf_counter() - t0

            print("kernel jobs (each task's expert as the candidate, the task's own timing)")
            print(
                f"  {'task':18s} {'wall s':>7s} {'calls':>5s} {'checks':>6s} {'measurer/call ms':>16s} "
                f"{'checks/call ms':>14s} {'ref ms':>7s} {'cand ms':>7s} {'reward':>6s}"
            )
            for name in args.tasks.split(","):
                src = (TASKS_DIR / name / "expert.py").read_text()
                res, wall = job("/verify/kernel", {"task": name, "files": {"candidate.py": src}})
                t, n = res["timings"], len(res["checks"])
                print(
                    f"  {name:18s} {wall:7.2f} {t['calls']:5d} {n:6d} {1e3 * t['measurer_overhead_s']:16.2f} "
                    f"{1e3 * res['verifier_overhead_s'] / n:14.2f} {1e3 * t['reference_s']:7.2f} "
                    f"{1e3 * t['candidate_s']:7.2f} {res['reward']:6.3f}"
                )
                rows.append((f"kernel:{name}", wall, f"{t['calls']} measured calls"))
            sid = c.post("/submission/sessions", json={"task": "blackbox_function"}).json()["id"]
            subs = []
            for i in range(5):
                s0 = time.perf_counter()
                c.post(
                    f"/submission/sessions/{sid}/submit",
                    json={"submission": {"expression": f"x*{i}", "probes": [i]}},
                )
                subs.append(time.perf_counter() - s0)
            _, wall = job("/verify/submission", {"session_id": sid})
            rows.append(
                (
                    "submission (hidden verifier job)",
                    wall,
                    f"public verifier {1e3 * statistics.median(subs):.1f} ms/submit",
                )
            )
            cands = [{"id": f"c{i}", "text": "word " * (20 + 5 * i)} for i in range(4)]
            res, wall = job("/judge", {"task": "Summarise.", "candidates": cands})
            rows.append(
                ("judge (GRM, 4 candidates)", wall, f"{res['model_calls']} scripted model calls")
            )
            if tools_server is not None:
                from datetime import timedelta

                from shared.clients import ToolsClient

                with ToolsClient(tools_url) as tools:
                    world = tools.create_world("personal_admin", seed=1)
                    at = tools.clock(world.id).now + timedelta(days=14)
                res, wall = job("/verify/world", {"world_id": world.id, "at": at.isoformat()})
                rows.append(
                    ("world (personal_admin, 14 days on)", wall, f"{res['events_total']} events")
                )
            app_dir = Path(__file__).resolve().parents[1] / "tests/verifier/web_apps/correct"
            files = {p.name: p.read_text() for p in app_dir.iterdir()}
            busy = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(args.load)
            ]
            try:
                for runtime in web_runtimes:
                    os.environ["K3STACK_VERIFIER__WEB_RUNTIME"] = runtime
                    get_settings.cache_clear()
                    for i in range(args.web_jobs):
                        res, wall = job("/verify/web", {"task": "counter_todo", "files": files})
                        left = len(httpx.get(f"{sandbox_url}/sandboxes").json())
                        rows.append(
                            (
                                f"web (correct app, {runtime}) #{i + 1}",
                                wall,
                                f"in sandbox {res['sandbox_s']:.2f} s, reward {res['reward']:.3f}, "
                                f"{left} sandboxes left, {args.load} busy cores",
                            )
                        )
            finally:
                for p in busy:
                    p.kill()
                    p.wait()
            print("\njob kinds (end to end through the API)")
            for kind, wall, note in rows:
                print(f"  {kind:36s} {wall:7.2f} s  {note}")
    for server in (tools_server, sandbox_server):
        if server is not None:
            server.should_exit = True


if __name__ == "__main__":
    main()
