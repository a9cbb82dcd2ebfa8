"""Oracle plan and catalogue latency: ``GET /scenarios/{name}/oracle`` uncached and cached, and
``GET /scenarios`` while an uncached plan is being computed (issue 27's figures).

    .venv/bin/python bench/tools_oracle.py [--scenario travel_offsite --seed 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="travel_offsite")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    os.environ["K3STACK_DATA_DIR"] = tempfile.mkdtemp(prefix="k3-oracle-bench-")
    os.environ.setdefault("K3STACK_AUTH_ENABLED", "false")
    from fastapi.testclient import TestClient

    from services.tools.app import create_app
    from shared.auth import API_KEY_HEADER, service_key

    with TestClient(create_app()) as c:
        c.headers[API_KEY_HEADER] = service_key(c.app.state.settings, "tools")
        url = f"/scenarios/{args.scenario}/oracle"
        done: dict[str, float] = {}

        def uncached() -> None:
            t0 = time.perf_counter()
            assert c.get(url, params={"seed": args.seed}).status_code == 200
            done["uncached"] = time.perf_counter() - t0

        worker = threading.Thread(target=uncached)
        worker.start()
        time.sleep(1.0)  # the plan is being computed now
        lists = []
        while worker.is_alive() and len(lists) < 20:
            t0 = time.perf_counter()
            assert c.get("/scenarios").status_code == 200
            lists.append(time.perf_counter() - t0)
            time.sleep(0.2)
        worker.join()
        t0 = time.perf_counter()
        assert c.get(url, params={"seed": args.seed}).status_code == 200
        cached = time.perf_counter() - t0
    print(f"GET {url}?seed={args.seed} uncached: {done['uncached']:.2f} s")
    print(f"GET {url}?seed={args.seed} cached:   {1e3 * cached:.1f} ms")
    if lists:
        print(f"GET /scenarios during the computation: max {1e3 * max(lists):.1f} ms, "
              f"median {1e3 * sorted(lists)[len(lists) // 2]:.1f} ms over {len(lists)} calls")  # fmt: skip


if __name__ == "__main__":
    main()
