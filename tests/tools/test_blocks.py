"""The conflict, delegation, report and drafting blocks against near-miss agents: the oracle
with one thing done wrong per block instance (follow the wrong person, mail the wrong
colleague, post a figure the world does not hold, miss one stated requirement). Each such
event fails, and the untouched ones still pass, so the checks judge the decision and the
state, not the words."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

from services.tools.events.ops.documents import word_count
from services.tools.scenarios import get_scenario
from services.tools.scenarios.drive import LocalDriver
from services.tools.scenarios.oracle import run_oracle
from shared.contracts.tools import ScenarioInstance


def _run(db, name: str, seed: int, patch: Callable[[ScenarioInstance], None]):  # type: ignore[no-untyped-def]
    """The oracle on ``name``/``seed`` with its plan changed by ``patch``: (passed by event,
    the driver)."""
    inst = get_scenario(name).build(seed)
    inst.oracle = copy.deepcopy(inst.oracle)
    patch(inst)
    driver = LocalDriver.create(db, name, seed)
    run_oracle(driver, inst)
    return {e.event_id: e.passed for e in driver.report().events}, driver


def _tool(steps: list[dict], tool: str) -> list[dict]:
    return [s for s in steps if s["tool"] == tool]


def test_conflict_blind_followers_fail_where_the_rule_says_otherwise(tools_client) -> None:
    """Following the latest instruction fails where the first speaker's call it was, keeping
    the first fails where it was the second's; the overridden person must be told."""
    db = tools_client.app.state.db
    name, seed = "finance_invoices", 0
    facts = get_scenario(name).build(seed).facts["conflicts"]
    assert {f["first_is_right"] for f in facts.values()} == {True, False}  # both orders
    assert len({f["field"] for f in facts.values()}) == 2  # priorities and deadlines

    def latest_wins(inst: ScenarioInstance) -> None:
        for b, f in facts.items():
            steps = inst.oracle[f"{b}-second"]
            update = next(s for s in inst.oracle[f"{b}-first"] if s["tool"] == "API-patch-page")
            wrong = copy.deepcopy(update)
            value = f["overridden"] if f["first_is_right"] else f["right"]
            wrong["args"]["properties"][f["field"]] = {"select": {"name": value}}
            inst.oracle[f"{b}-second"] = [
                wrong,
                *_tool(steps, "send_email"),
                *_tool(steps, "slack_post_message"),
            ]

    def first_wins(inst: ScenarioInstance) -> None:
        for b in facts:
            inst.oracle[f"{b}-second"] = [
                s for s in inst.oracle[f"{b}-second"] if s["tool"] != "API-patch-page"
            ]

    def nobody_told(inst: ScenarioInstance) -> None:
        for b in facts:
            inst.oracle[f"{b}-second"] = _tool(inst.oracle[f"{b}-second"], "API-patch-page")

    for patch, fails in (
        (latest_wins, lambda f: f["first_is_right"]),
        (first_wins, lambda f: not f["first_is_right"]),
        (nobody_told, lambda f: True),
    ):
        passed, _ = _run(db, name, seed, patch)
        for b, f in facts.items():
            assert passed[f"{b}-second"] is not fails(f), (patch.__name__, b, f)
            assert passed[f"{b}-first"], (patch.__name__, b)


def test_delegation_reacts_only_to_mail_that_reached_the_colleague(tools_client) -> None:
    """Mailing the request to someone else leaves the colleague silent (nothing delivered,
    nothing to chase for); not chasing at the deadline leaves the late figure unsent."""
    db = tools_client.app.state.db
    name, seed = "legal_contracts", 0
    inst = get_scenario(name).build(seed)
    ids = {e.id for e in inst.events}
    on_time = sorted(b[: -len("-delivered")] for b in ids if b.endswith("-delivered"))
    chased = sorted(b[: -len("-late")] for b in ids if b.endswith("-late"))
    assert on_time and chased  # one colleague delivers, one has to be chased
    owner = (
        next(e for e in inst.events if e.id == f"{on_time[0]}-ask").effects[0].args["from_email"]
    )

    def elsewhere(inst: ScenarioInstance) -> None:
        for b in on_time:
            for s in inst.oracle[f"{b}-ask"]:
                s["args"]["to"] = [owner]

    def no_chase(inst: ScenarioInstance) -> None:
        for b in chased:
            inst.oracle[f"{b}-follow-up"] = _tool(
                inst.oracle[f"{b}-follow-up"], "slack_post_message"
            )

    passed, driver = _run(db, name, seed, elsewhere)
    status = {e.event_id: e.status for e in driver.events()}
    for b in on_time:
        assert not passed[f"{b}-ask"] and status[f"{b}-delivered"] == "waiting"
    assert all(passed[f"{b}-late"] for b in chased)
    passed, driver = _run(db, name, seed, no_chase)
    status = {e.event_id: e.status for e in driver.events()}
    for b in chased:
        assert not passed[f"{b}-follow-up"] and status[f"{b}-late"] == "waiting"
    assert all(passed[f"{b}-delivered"] for b in on_time)


def test_report_figures_are_computed_from_the_world(tools_client) -> None:
    """The corrected total is judged against the Notion database as it stands: posting the
    right number without fixing the row fails, and so does fixing the row and posting the
    old total; a morning report with the visit count off by one fails too."""
    db = tools_client.app.state.db
    name, seed = "sales_crm", 0

    def patch(inst: ScenarioInstance) -> None:
        fix, post = inst.oracle["report-0-correction"]
        inst.oracle["report-0-correction"] = [post]  # the right total, the row left wrong
        fix1, post1 = inst.oracle["report-1-correction"]
        old = inst.oracle["report-1-morning"][0]["args"]["text"]
        inst.oracle["report-1-correction"] = [fix1, _with_text(post1, old)]  # the old total
        morning = inst.oracle["report-0-morning"][0]
        morning["args"]["text"] = re.sub(
            r"(\d+) client visits",
            lambda m: f"{int(m.group(1)) + 1} client visits",
            morning["args"]["text"],
        )
        assert morning["args"]["text"] != morning["text"]  # the count changed

    passed, _ = _run(db, name, seed, patch)
    assert not passed["report-0-correction"] and not passed["report-1-correction"]
    assert not passed["report-0-morning"] and passed["report-1-morning"]


def _with_text(step: dict, text: str) -> dict:
    out = copy.deepcopy(step)
    out["args"]["text"] = text
    return out


def _para(text: str) -> dict:
    return {
        "object": "block",
        "type": "paragraph",
        "paragraph": {"rich_text": [{"type": "text", "text": {"content": text}}]},
    }


def _limits(inst: ScenarioInstance, b: str) -> tuple[int, int]:
    ev = {e.id: e for e in inst.events}
    first, second = (
        next(c for c in ev[f"{b}-{k}"].checks if c.kind == "notion.page")
        for k in ("request", "revision")
    )
    return first.args["max_words"], second.args["max_words"]


def test_drafting_checks_every_stated_requirement(tools_client) -> None:
    """Sections out of order, a page over the revised word limit, a second copy, the
    revision's section without the processing day, the stale figure: each fails its
    event, and the instance left alone passes."""
    db = tools_client.app.state.db
    name, seed = "research_review", 0

    def swap_sections_and_pad(inst: ScenarioInstance) -> None:
        body = inst.oracle["drafting-0-request"][0]["args"]["children"]
        body[0], body[2] = body[2], body[0]  # the first two headings change places
        body = inst.oracle["drafting-1-request"][0]["args"]["children"]
        first, second = _limits(inst, "drafting-1")
        have = sum(word_count(b[b["type"]]["rich_text"][0]["text"]["content"]) for b in body)
        body.append(_para("word " * (second - have + 5)))  # within the first limit only
        assert have + second - have + 5 <= first

    passed, _ = _run(db, name, seed, swap_sections_and_pad)
    assert not passed["drafting-0-request"]
    assert passed["drafting-1-request"] and not passed["drafting-1-revision"]

    def twice_and_no_day(inst: ScenarioInstance) -> None:
        steps = inst.oracle["drafting-0-request"]
        steps.insert(0, copy.deepcopy(steps[0]))  # the page created twice
        step = inst.oracle["drafting-1-revision"][0]
        step["args"]["children"][1] = _para("Decided items are processed next week.")

    passed, _ = _run(db, name, seed, twice_and_no_day)
    assert not passed["drafting-0-request"]
    assert passed["drafting-1-request"] and not passed["drafting-1-revision"]

    def stale_figure(inst: ScenarioInstance) -> None:
        ev = {e.id: e for e in inst.events}
        page = next(c for c in ev["drafting-0-request"].checks if c.kind == "notion.page")
        body = inst.oracle["drafting-0-request"][0]["args"]["children"]
        body.append(_para(f"An earlier draft said {page.args['excludes'][0]}."))

    passed, _ = _run(db, name, seed, stale_figure)
    assert not passed["drafting-0-request"] and not passed["drafting-0-revision"]
    assert passed["drafting-1-request"] and passed["drafting-1-revision"]
