"""Tools service latency: p50/p99 of typical app calls, and world snapshot / restore / fork
time for a world holding 1,000 messages.

Runs in-process (FastAPI TestClient over a fresh SQLite file), so the figures are the service's
own cost without network. Baseline in the same run: ``GET /health`` (the framework's floor),
printed with every figure as a ratio.

    python bench/tools_api.py [--messages 1000] [--calls 200]
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _raw(i: int) -> bytes:
    msg = EmailMessage()
    msg["From"] = f"Sender {i % 37} <sender{i % 37}@corp.test>"
    msg["To"] = "alex.morgan@k3stack.test"
    msg["Subject"] = f"Report {i} about project {i % 11}"
    msg["Message-ID"] = f"<bench-{i}@corp.test>"
    msg.set_content(f"Hello, here is update number {i} on project {i % 11}. " * 8)
    return msg.as_bytes()


def _time(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    os.environ["K3STACK_DATA_DIR"] = tempfile.mkdtemp(prefix="k3-tools-bench-")
    os.environ.setdefault("K3STACK_AUTH_ENABLED", "false")
    from fastapi.testclient import TestClient

    from services.tools.app import create_app
    from services.tools.apps.gmail import actions as gm
    from services.tools.context import open_world
    from shared.auth import API_KEY_HEADER, service_key

    with TestClient(create_app()) as c:
        c.headers[API_KEY_HEADER] = service_key(c.app.state.settings, "tools")  # admin routes
        w = c.post("/worlds", json={"scenario": "empty", "seed": 0}).json()
        wid, h = w["id"], {"Authorization": f"Bearer {w['token']}"}
        t0 = time.perf_counter()
        with c.app.state.db.session() as s, open_world(s, wid) as ctx:
            for i in range(args.messages):
                gm.deliver(ctx, _raw(i))
        print(f"seeded {args.messages} messages in {time.perf_counter() - t0:.2f}s")
        g = f"/worlds/{wid}/gmail/v1/users/me"
        ids = [
            m["id"]
            for m in c.get(f"{g}/messages", params={"maxResults": 500}, headers=h).json()[
                "messages"
            ]
        ]
        raw = base64.urlsafe_b64encode(_raw(10**6)).decode()
        n = args.calls
        calls: dict[str, Callable[[], object]] = {
            "GET /health (baseline)": lambda: c.get("/health"),
            "gmail messages.list (no q)": lambda: c.get(f"{g}/messages", headers=h),
            "gmail messages.list q=from:sender3 project": lambda: c.get(
                f"{g}/messages", params={"q": "from:sender3 project"}, headers=h
            ),
            "gmail messages.get full": lambda: c.get(f"{g}/messages/{ids[7]}", headers=h),
            "gmail messages.modify": lambda: c.post(
                f"{g}/messages/{ids[9]}/modify", json={"addLabelIds": ["STARRED"]}, headers=h
            ),
            "gmail messages.send": lambda: c.post(
                f"{g}/messages/send", json={"raw": raw}, headers=h
            ),
            "gmail labels.list": lambda: c.get(f"{g}/labels", headers=h),
            "clock advance by 1m": lambda: c.post(f"/worlds/{wid}/clock/advance", json={"by": 60}),
        }
        rows = []
        for name, fn in calls.items():
            fn()
            xs = _time(fn, n)
            rows.append((name, _pct(xs, 50), _pct(xs, 99)))
        base = rows[0][1]
        print(f"\n{'call':48s} {'p50 ms':>8s} {'p99 ms':>8s} {'p50/base':>9s}")
        for name, p50, p99 in rows:
            print(f"{name:48s} {p50:8.2f} {p99:8.2f} {p50 / base:9.1f}x")

        reps = 5
        snaps: list[str] = []
        lifecycle = {
            "snapshot": lambda: snaps.append(
                c.post(f"/worlds/{wid}/snapshots", json={}).json()["id"]
            ),
            "restore": lambda: c.post(f"/worlds/{wid}/restore", json={"snapshot_id": snaps[0]}),
            "fork": lambda: c.post(f"/worlds/{wid}/fork"),
            "state export (hash)": lambda: c.get(f"/worlds/{wid}/state", params={"tables": False}),
        }
        print(f"\nworld with {args.messages} messages, {reps} runs each")
        print(f"{'operation':48s} {'median ms':>10s} {'/base':>9s}")
        for name, fn in lifecycle.items():
            xs = _time(fn, reps)
            med = statistics.median(xs)
            print(f"{name:48s} {med:10.1f} {med / base:9.0f}x")
        size = max(x["size"] for x in c.get(f"/worlds/{wid}/snapshots").json())
        print(f"\nsnapshot size (compressed JSON): {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
