"""What the shared job model costs, in embedded mode (SQLite database and broker).

    .venv/bin/python bench/jobs.py [--jobs 200] [--progress 500] [--worker-jobs 20]

Prints three figures:

- bookkeeping per job, eager (no broker): create the row, claim it, heartbeat thread, write the
  result — what every job pays on top of its body;
- one ``JobRun.progress`` call (an UPDATE on the row, heartbeat included);
- submit → ``succeeded`` latency through a real worker process over the embedded broker (polled
  every 0.1 s), median and worst, with the job read back by polling SQL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bookkeeping(n: int, progress_calls: int) -> None:
    from services.verifier.models import JobRow
    from services.verifier.tasks import MIGRATIONS, register_tasks
    from shared.db import ServiceDatabase
    from shared.jobs import JobRun, JobStore, submit
    from shared.queue import make_celery
    from shared.settings import load_settings

    settings = load_settings(celery_eager=True)
    db = ServiceDatabase("verifier", settings.database_url or "", MIGRATIONS)
    db.migrate()
    store = JobStore(db, JobRow)
    echo = register_tasks(make_celery("verifier", settings), store).echo
    submit(store, echo, kind="echo", payload={"warm": True})
    started = time.perf_counter()
    for i in range(n):
        submit(store, echo, kind="echo", payload={"i": i})
    per_job = (time.perf_counter() - started) / n
    print(f"eager job (create, claim, run, result): {per_job * 1e3:7.2f} ms/job over {n} jobs")

    job = store.create(kind="echo", payload={}, task_name="verifier.echo")
    assert store.claim(job.id, "bench:0:x").started
    run = JobRun(store, job.id, "bench:0:x", {}, 1)
    started = time.perf_counter()
    for i in range(progress_calls):
        run.progress(i / progress_calls, f"step {i}")
    per_call = (time.perf_counter() - started) / progress_calls
    print(
        f"JobRun.progress:                        {per_call * 1e3:7.2f} ms/call over {progress_calls}"
    )
    db.close()


def through_a_worker(n: int) -> None:
    from services.verifier.models import JobRow
    from services.verifier.tasks import MIGRATIONS, register_tasks
    from shared.db import ServiceDatabase
    from shared.jobs import JobStore, submit, wait_for_job
    from shared.queue import make_celery, worker_argv
    from shared.settings import load_settings

    settings = load_settings()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    log_path = Path(os.environ["K3STACK_DATA_DIR"]) / "worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, *worker_argv("verifier", 1, pool="solo")],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while " ready." not in log_path.read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("worker did not start:\n" + log_path.read_text()[-2000:])
            time.sleep(0.05)
        db = ServiceDatabase("verifier", settings.database_url or "", MIGRATIONS)
        db.migrate()
        store = JobStore(db, JobRow)
        echo = register_tasks(make_celery("verifier", settings), store).echo
        latencies = []
        for i in range(n + 1):
            started = time.perf_counter()
            job = submit(store, echo, kind="echo", payload={"i": i})
            done = wait_for_job(
                lambda j=job: store.require(j.id), 60, initial_s=0.005, max_interval_s=0.01
            )
            assert done.status.value == "succeeded", done
            if i:  # the first one warms the worker up
                latencies.append(time.perf_counter() - started)
        print(
            f"submit -> succeeded via a worker:       {statistics.median(latencies) * 1e3:7.1f} ms "
            f"median, {max(latencies) * 1e3:.1f} ms worst over {n} jobs"
        )
        db.close()
    finally:
        worker.terminate()
        worker.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--progress", type=int, default=500)
    parser.add_argument("--worker-jobs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="k3stack-bench-jobs-") as tmp:
        for name in [k for k in os.environ if k.startswith("K3STACK_")]:
            del os.environ[name]
        os.environ.update(K3STACK_DATA_DIR=tmp, K3STACK_ENV_FILE="/nonexistent/.env")
        bookkeeping(args.jobs, args.progress)
        if args.worker_jobs:
            through_a_worker(args.worker_jobs)


if __name__ == "__main__":
    main()
