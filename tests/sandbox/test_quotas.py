"""Quotas per client on the data plane (``api/guestcalls.py``): streams and exec/file calls are
bounded per API key and per sandbox as well as globally, the last places of each global bound are
kept for clients holding almost nothing, a 429 names the quota it hit, and a kill is always
admitted. Before: 4 sandboxes x 64 held streams made a fifth sandbox's exec 429 for an hour."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from services.sandbox.api.guestcalls import SMALL, GuestCalls
from shared.errors import APIError
from tests.sandbox.conftest import process_runtime_ready, served
from tests.sandbox.waiting import eventually

pytestmark = pytest.mark.timeout(280)
GENEROUS_S = 60.0
"""A bound no healthy answer comes near (they take well under 2 s); a starved one waits on."""


def refused(fn, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(APIError) as e:
        with fn(*args):
            pass
    assert e.value.status == 429
    return e.value.message


def test_pools_bound_each_client_and_keep_a_reserve() -> None:
    calls = GuestCalls(16, per_sandbox=8, per_key=6, streams=32, streams_per_key=12, reserve=4)
    held = []

    def take(pool, sid, key):  # type: ignore[no-untyped-def]
        cm = calls.hold(pool, sid, key)
        cm.__enter__()
        held.append(cm)

    # four clients, two sandboxes each, take streams until refused
    got: Counter[str] = Counter()
    for client in range(4):
        for _ in range(20):
            try:
                take(calls.streams, f"s{client}-{got[client] % 2}", f"k{client}")
                got[client] += 1
            except APIError:
                break
    # two fill their key's 12; the third stops at the reserve; the fourth, small, takes from it
    assert got == {0: 12, 1: 12, 2: 4, 3: SMALL}, got
    assert "client quota" in refused(calls.hold, calls.streams, "s0-0", "k0")
    assert "GUEST_STREAMS_PER_KEY" in refused(calls.hold, calls.streams, "s0-0", "k0")
    assert "reserve" in refused(calls.hold, calls.streams, "s3-0", "k3")
    # a fifth client gets in, up to SMALL places; then it too is refused, naming the quota
    for _ in range(SMALL):
        take(calls.streams, "s4", "k4")
    assert "global quota" in refused(calls.hold, calls.streams, "s4", "k4")
    # the per-sandbox bound holds for calls without a key (the sandbox is the client)
    for _ in range(6):
        take(calls.calls, "s9", None)
    for _ in range(2):
        take(calls.calls, "s9", "k9")
    assert "sandbox quota" in refused(calls.slot, "s9", "k10")
    for cm in held:
        cm.__exit__(None, None, None)
    assert not calls.streaming and not calls.in_flight


@pytest.fixture
def url(tmp_path: Path):  # type: ignore[no-untyped-def]
    ok, why = process_runtime_ready()
    if not ok:
        pytest.fail(f"the process runtime cannot run here: {why}")
    with served(tmp_path / "data", "process", guest_streams_limit=32, guest_streams_per_key=12,
                guest_reserve=4) as base:  # fmt: skip
        yield base


def test_four_clients_holding_streams_leave_a_fifth_answering(url):  # type: ignore[no-untyped-def]
    """Four clients each hold streamed ``sleep 300`` execs on their sandbox and retry every
    429; a fifth client's plain exec and streamed exec still answer, and a kill of a flooding
    sandbox is admitted. Local mode checks no key, so each sandbox is a client (the pools'
    rules per API key are the test above)."""
    c = httpx.Client(base_url=url, timeout=GENEROUS_S)
    sids = []
    for _ in range(5):
        r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0})
        assert r.status_code == 201, r.text
        sids.append(r.json()["sandboxID"])
    stop = threading.Event()
    holding: Counter[int] = Counter()
    refusals: list[str] = []

    def flood(client: int) -> None:
        """One of a client's streams: opened again after every 429, held until the end."""
        with httpx.Client(base_url=url, timeout=300) as own:
            while not stop.is_set():
                body = {"cmd": "sleep 300", "timeout_s": 0}
                with own.stream("POST", f"/sandboxes/{sids[client]}/exec/stream", json=body) as r:
                    if r.status_code != 200:  # 429, or 404 once its sandbox is killed
                        refusals.append(r.read().decode())
                        stop.wait(0.05)
                        continue
                    holding[client] += 1
                    stop.wait()  # held open, unread, until the test ends
                    holding[client] -= 1

    threads = [threading.Thread(target=flood, args=(i // 10,), daemon=True) for i in range(40)]
    for t in threads:
        t.start()
    try:
        eventually(lambda: sum(holding.values()), lambda n: n >= 32 - 4 - SMALL,
                   what="the four clients hold the streams")  # fmt: skip
        eventually(lambda: len(refusals), lambda n: n >= 10, what="floods refused and retrying")
        assert all("quota" in m for m in refusals[:10]), refusals[:3]
        t0 = time.monotonic()
        r = c.post(f"/sandboxes/{sids[4]}/exec", json={"cmd": "echo fifth"})
        took = time.monotonic() - t0
        assert r.status_code == 200 and r.json()["stdout"] == "fifth\n", r.text
        assert took < GENEROUS_S
        with c.stream(
            "POST", f"/sandboxes/{sids[4]}/exec/stream", json={"cmd": "echo streamed"}
        ) as r:
            assert r.status_code == 200
            assert "streamed" in r.read().decode()
        assert c.delete(f"/sandboxes/{sids[0]}").status_code == 204  # a kill is admitted
    finally:
        stop.set()
        for t in threads:
            t.join(GENEROUS_S)
