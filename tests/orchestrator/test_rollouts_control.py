"""Steering a running batch over HTTP: a new policy version while samples run pauses them at
their next tick and resumes them at once under it (no 409), token for token what an
uninterrupted run sends; cancelling one sample, then the whole rollout, stops each at its next
tick as ``cancelled`` (409 once ended, 404 for an unknown one)."""

from __future__ import annotations

import json
import threading
import time

from services.orchestrator.rollouts.models import RolloutRow, SampleRow
from tests.helpers.asgi import serve
from tests.orchestrator.rollout_endpoint import endpoint
from tests.orchestrator.test_rollouts_api import api  # noqa: F401 - the fixture

LONG = {"instruction": "Take notes. turns=5"}
WAIT_S = 120.0


def _policy(url: str, version: str) -> dict:
    return {"base_url": f"{url}/v1", "version": version, "temperature": 0.0, "seed": 3}


def _until(pred, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _join(threads: list[threading.Thread]) -> None:
    for t in list(threads):
        t.join(timeout=WAIT_S)
    assert not any(t.is_alive() for t in threads)


def test_version_bump_while_running_swaps_at_the_next_tick(api) -> None:  # noqa: F811
    client, threads = api
    db = client.app.state.db
    at_turn_2: list[int] = []
    holder: dict[str, str] = {}

    def gate(turn: int, instruction: str) -> None:
        """Each sample's third model call waits until the bump to v2 is in."""
        if turn == 2 and "rid" in holder:
            at_turn_2.append(turn)
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                with db.session() as s:
                    if s.get(RolloutRow, holder["rid"]).iteration >= 2:
                        return
                time.sleep(0.05)

    with serve(endpoint(gate)) as url:
        body = {"tasks": [LONG], "samples_per_task": 2, "policy": _policy(url, "v1"), "lam": 1.0}
        holder["rid"] = rid = client.post("/rollouts", json=body).json()["id"]
        _until(lambda: len(at_turn_2) == 2, "both samples at their third call")
        bumped = client.post(f"/rollouts/{rid}/iterate", json={"policy": _policy(url, "v2")})
        assert bumped.status_code == 200, bumped.text
        _join(threads)
        view = client.get(f"/rollouts/{rid}").json()
        holder.pop("rid")
        ref = client.post("/rollouts", json={**body, "samples_per_task": 1}).json()["id"]
        _join(threads)
    assert view["counts"] == {"finished": 2}, view
    with db.session() as s:
        roll = s.get(RolloutRow, rid)
        assert roll.history[-1]["resumed"] == 2  # both paused and resumed under v2
        for sample in view["samples"]:
            row = s.get(SampleRow, sample["id"])
            assert row.paused["swaps"] == 1 and row.paused["iteration"] == 1
            assert row.iteration == 2
    for sample in view["samples"]:
        spans = sample["versions"]
        assert [v["version"] for v in spans] == ["v1", "v2"] and spans[0]["end"] > 0
    lines = client.get(f"/rollouts/{rid}/export").text.splitlines()
    ref_line = client.get(f"/rollouts/{ref}/export").text.splitlines()[0]
    ref_ids = json.loads(ref_line)["tokens"]["ids"]
    assert [json.loads(line)["tokens"]["ids"] for line in lines] == [ref_ids, ref_ids]


def test_cancel_a_sample_then_the_rollout(api) -> None:  # noqa: F811
    client, threads = api
    waiting: list[int] = []
    release = threading.Event()

    def gate(turn: int, instruction: str) -> None:
        if turn == 1:
            waiting.append(turn)
            release.wait(WAIT_S)

    with serve(endpoint(gate)) as url:
        body = {"tasks": [LONG], "samples_per_task": 3, "policy": _policy(url, "v1")}
        rid = client.post("/rollouts", json=body).json()["id"]
        _until(lambda: len(waiting) == 3, "three samples at their second call")
        one = client.post(f"/rollouts/{rid}/samples/{rid}_0_0/cancel")
        assert one.status_code == 200, one.text
        phases = {s["id"]: s["phase"] for s in one.json()["samples"]}
        assert phases == {f"{rid}_0_0": "cancelled", f"{rid}_0_1": "live", f"{rid}_0_2": "live"}
        again = client.post(f"/rollouts/{rid}/samples/{rid}_0_0/cancel")
        assert again.status_code == 409 and "already ended" in again.text
        assert client.post(f"/rollouts/{rid}/samples/{rid}_9_9/cancel").status_code == 404
        assert client.post("/rollouts/ro_nope/cancel").status_code == 404
        rest = client.post(f"/rollouts/{rid}/cancel")
        assert rest.status_code == 200 and rest.json()["counts"] == {"cancelled": 3}
        release.set()
        _join(threads)
    view = client.get(f"/rollouts/{rid}").json()
    assert view["counts"] == {"cancelled": 3}
    for sample in view["samples"]:  # each stopped at the tick after its cancel
        assert sample["status"] == "cancelled" and sample["steps"] <= 2, sample
