"""Fast pages: oracle plans and scenario pages are computed once per (scenario, seed), and a
plan being computed holds nothing another request waits on (asserted structurally: the
catalogue answers while the computation is held open, no timing)."""

from __future__ import annotations

import threading

from services.tools.scenarios import SCENARIOS, cache
from services.tools.scenarios import oracle as oracle_mod
from tests.tools.test_events import MiniScenario


def test_a_plan_is_computed_once_per_scenario_and_seed(tools_client, monkeypatch):
    monkeypatch.setitem(SCENARIOS, "test_mini", MiniScenario())
    before = cache.plans.computed
    first = tools_client.get("/scenarios/test_mini/oracle", params={"seed": 4})
    again = tools_client.get("/scenarios/test_mini/oracle", params={"seed": 4})
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert cache.plans.computed == before + 1
    other = tools_client.get("/scenarios/test_mini/oracle", params={"seed": 5})
    assert other.status_code == 200 and cache.plans.computed == before + 2
    page = tools_client.get("/scenarios/test_mini", params={"seed": 4})
    assert page.json() == tools_client.get("/scenarios/test_mini", params={"seed": 4}).json()
    # no scratch world is left behind by the computation
    assert all(w["scenario"] != "test_mini" or w["seed"] not in (4, 5)
               for w in tools_client.get("/worlds").json())  # fmt: skip


def test_the_catalogue_answers_while_a_plan_is_computed(tools_client, monkeypatch):
    monkeypatch.setitem(SCENARIOS, "test_mini", MiniScenario())
    started, release = threading.Event(), threading.Event()
    real = oracle_mod.run_oracle

    def held(driver, inst):  # the computation, held open until the catalogue has answered
        started.set()
        assert release.wait(120)
        return real(driver, inst)

    monkeypatch.setattr(oracle_mod, "run_oracle", held)
    out: dict[str, int] = {}
    slow = threading.Thread(
        target=lambda: out.update(
            code=tools_client.get("/scenarios/test_mini/oracle", params={"seed": 9}).status_code
        )
    )
    slow.start()
    try:
        assert started.wait(120), "the plan never started computing"
        listed = tools_client.get("/scenarios")  # would block here if it shared the lock
        page = tools_client.get("/scenarios/hr_leave", params={"seed": 9})
        assert listed.status_code == 200 and page.status_code == 200
        assert not out, "the plan finished before it was released"
    finally:
        release.set()
        slow.join(120)
    assert out == {"code": 200}
