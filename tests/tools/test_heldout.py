"""The library against agents it was not tuned on (``tests.tools.heldout``).

- The oracle with its verdict sentences rephrased (same actions, recipients and values)
  passes >= 95% of the events on every scenario.
- The held-out broad-action agent (Canvas included) and the single-verdict agents pass at
  most 10% of any scenario's events, on seed 0 here and on seeds 0-19 in the slow test.
"""

from __future__ import annotations

import random

import pytest

from services.tools.events.marks import agent_changes
from services.tools.scenarios import SCENARIOS, get_scenario
from services.tools.scenarios.baselines import run_agent
from services.tools.scenarios.drive import LocalDriver
from services.tools.scenarios.oracle import run_oracle
from tests.tools.heldout import HELD_OUT, Paraphrasing, paraphrase

LIBRARY = sorted(n for n in SCENARIOS if n != "empty")


def test_paraphrase_changes_the_words_not_the_figures() -> None:
    rng = random.Random(1)
    text = "Hi Ana, LV-3011 is declined: 21 days is over the maximum leave block of 18 days."
    out = paraphrase(text, rng)
    assert out != text and "LV-3011" in out and "21 days" in out and "declined" not in out
    assert paraphrase("Approved: LV-1, LV-2.", rng) == "Approved: LV-1, LV-2."


@pytest.mark.parametrize("name", LIBRARY)
def test_paraphrased_oracle_passes_95_percent(tools_client, name: str) -> None:
    db = tools_client.app.state.db
    inst = get_scenario(name).build(0)
    driver = Paraphrasing(LocalDriver.create(db, name, 0), random.Random(name))
    run_oracle(driver, inst)
    report = driver.report()
    failed = [e.event_id for e in report.events if not e.passed]
    assert driver.rewritten >= 2  # the approval blocks' answers were all rephrased
    assert report.events_passed >= 0.95 * report.events_total, failed


def _held_out_passes(db, name: str, seed: int) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    inst = get_scenario(name).build(seed)
    template = LocalDriver.create(db, name, seed)
    out = {}
    for agent, act in HELD_OUT.items():
        driver = template.fork()
        run_agent(driver, inst, act)
        out[agent] = [e.event_id for e in driver.report().events if e.passed]
        if agent == "broad_action" and "canvas" in inst.apps:
            with db.session() as s:  # it did act on Canvas: submissions or grades written
                assert "canvas_objects" in agent_changes(s, driver.world_id), name
    return out


@pytest.mark.parametrize("name", LIBRARY)
def test_held_out_agents_stay_under_ten_percent(tools_client, name: str) -> None:
    limit = 0.10 * len(get_scenario(name).build(0).events)
    passed = _held_out_passes(tools_client.app.state.db, name, 0)
    assert all(len(p) <= limit for p in passed.values()), passed


@pytest.mark.slow
def test_held_out_agents_over_seeds_1_to_19(tools_client) -> None:
    """Seeds 1-19 (seed 0 above) in rotation, to stay near two minutes: odd seeds one of
    the two Canvas scenarios (where the broad agent submits and grades everything), even
    seeds the next scenario of the library (the full 16 x 20 sweep: README's figures)."""
    db = tools_client.app.state.db
    canvas = [n for n in LIBRARY if "canvas" in get_scenario(n).build(0).apps]
    assert len(canvas) >= 2
    for seed in range(1, 20):
        name = canvas[seed // 2 % 2] if seed % 2 else LIBRARY[seed // 2 % len(LIBRARY)]
        total = len(get_scenario(name).build(seed).events)
        for agent, passed in _held_out_passes(db, name, seed).items():
            assert len(passed) <= 0.10 * total, (name, seed, agent, passed)
