"""The scenario library: its shape, counted over the whole library, and the anti-gaming matrix.

For every scenario and seeds 0-2, in-process (MCP tool handlers and the event engine on the
service's database, no HTTP): the oracle passes every event; the do-nothing and read-only
agents pass none and trip no collateral check; every broad agent (``scenarios.baselines``)
passes at most 10% of the events. Over HTTP: the oracle through ``/worlds/{id}/mcp``, and the
recorded oracle plan (``GET /scenarios/{name}/oracle``) replayed on a fresh world.
"""

from __future__ import annotations

from functools import cache

import pytest

from services.tools.scenarios import SCENARIOS, get_scenario
from services.tools.scenarios.baselines import AGENTS, Inbox, run_agent
from services.tools.scenarios.drive import HTTPDriver, LocalDriver
from services.tools.scenarios.oracle import replay, run_oracle
from shared.contracts.tools import OraclePlan, ScenarioInstance
from tests.tools.conftest import create_world

LIBRARY = sorted(n for n in SCENARIOS if n != "empty")
SEEDS = (0, 1, 2)
COLLATERAL = ("world.collateral", "world.budget")
BROAD = [a for a in AGENTS if a not in ("do_nothing", "read_only")]


@cache
def instance(name: str, seed: int) -> ScenarioInstance:
    return get_scenario(name).build(seed)


def chain_depth(inst: ScenarioInstance) -> int:
    """Edges on the longest path of the event graph (``depends_on``)."""
    parents = {e.id: e.depends_on for e in inst.events}

    @cache
    def depth(ev: str) -> int:
        return max((depth(p) + 1 for p in parents[ev]), default=0)

    return max(depth(e) for e in parents)


def test_library_covers_the_domains() -> None:
    assert len(LIBRARY) >= 12
    domains = {SCENARIOS[n].domain for n in LIBRARY}
    wanted = {"finance", "hr", "legal", "personal", "sales", "engineering", "travel", "research"}
    assert wanted <= domains, wanted - domains


def test_library_templates() -> None:
    """>= 16 scenarios with >= 8 distinct templates (block mixes), two of them on Canvas;
    the newer block kinds each in several scenarios: triage and time zones in >= 3,
    conflicting instructions, delegation, the recurring report and drafting in >= 2."""
    from services.tools.scenarios.docs import template

    templates = {n: template(n) for n in LIBRARY}
    assert len(LIBRARY) >= 16
    assert len(set(templates.values())) >= 8, templates
    assert sum("canvas" in instance(n, 0).apps for n in LIBRARY) >= 2
    for kind in ("triage", "timezones"):
        assert sum(kind in t for t in templates.values()) >= 3, kind
    uses = {n: {b.block for b in SCENARIOS[n].spec.blocks} for n in LIBRARY}
    for kind in ("conflict", "delegation", "report", "drafting"):
        having = {templates[n] for n in LIBRARY if kind in uses[n]}
        assert len(having) >= 2, (kind, having)


@pytest.mark.parametrize("seed", SEEDS)
def test_library_counts(seed: int) -> None:
    """Every scenario: >= 40 events over >= 5 simulated days, >= 3 apps, >= 10 triggered
    events, a chain >= 4 deep, and the graph's kinds of dependency all present."""
    short = {}
    for name in LIBRARY:
        inst = instance(name, seed)
        ids = [e.id for e in inst.events]
        triggered = [e for e in inst.events if e.trigger is not None]
        kinds = {
            "agent": any(t.trigger.app and t.trigger.actor == "agent" for t in triggered),
            "npc": any(t.trigger.actor.startswith("event:") for t in triggered),
            "event": any(t.trigger.after_event for t in triggered),
            "absence": any(e.unless is not None for e in inst.events),
        }
        tags = {t for e in inst.events for t in e.tags}
        facts = {
            "events": len(inst.events),
            "days": (inst.end - inst.start).total_seconds() / 86400,
            "apps": len(inst.apps),
            "triggered": len(triggered),
            "depth": chain_depth(inst),
        }
        if (
            facts["events"] < 40
            or facts["days"] < 5
            or facts["apps"] < 3
            or facts["triggered"] < 10
            or facts["depth"] < 4
            or not all(kinds.values())
            or not {"branching", "late-info", "moving-deadline", "conflict", "escalation"} <= tags
            or not any(c.kind == "judge" and c.fallback for e in inst.events for c in e.checks)
        ):
            short[name] = (facts, kinds, sorted(tags))
        assert len(ids) == len(set(ids))
        checks = [c.id for e in inst.events for c in e.checks]
        assert len(checks) == len(set(checks)) and all(checks)
        # every event has something to do: a check that is not only a budget or a negative
        assert all(
            any(c.kind not in (*COLLATERAL, "say.none") for c in e.checks) for e in inst.events
        )
        assert set(inst.oracle) == set(ids)
        for e in inst.events:
            assert set(e.depends_on) <= set(ids)
    assert not short, short


@pytest.mark.parametrize("name", LIBRARY)
def test_instances_are_seeded(name: str) -> None:
    sc = get_scenario(name)
    assert sc.build(1).model_dump() == instance(name, 1).model_dump()  # same seed, same world
    assert instance(name, 0).model_dump() != instance(name, 1).model_dump()


def _collateral_tripped(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.id for e in report.events for c in e.checks if c.kind in COLLATERAL and not c.passed]


@pytest.mark.parametrize(
    "seed", [pytest.param(s, marks=[pytest.mark.slow] if s else []) for s in SEEDS]
)
@pytest.mark.parametrize("name", LIBRARY)
def test_oracle_passes_and_baselines_fail(tools_client, name: str, seed: int) -> None:
    db = tools_client.app.state.db
    inst = instance(name, seed)
    oracle = LocalDriver.create(db, name, seed)
    run_oracle(oracle, inst)
    report = oracle.report()
    failed = {e.event_id: [c.detail for c in e.checks if not c.passed] for e in report.events}
    assert report.events_passed == report.events_total == len(inst.events), {
        k: v for k, v in failed.items() if v
    }
    limit = 0.10 * len(inst.events)
    template = LocalDriver.create(db, name, seed)
    for agent, act in AGENTS.items():
        driver = template.fork()
        run_agent(driver, inst, act)
        rep = driver.report()
        passed = [e.event_id for e in rep.events if e.passed]
        if agent in ("do_nothing", "read_only"):
            assert not passed, (agent, passed)
            assert not _collateral_tripped(rep), (agent, _collateral_tripped(rep))
        else:
            assert len(passed) <= limit, (agent, passed)


def test_broad_agents_trip_the_budgets_and_leak_checks(tools_client) -> None:
    """The per-event write budgets bite on agents that write for volume, and the negative
    checks on agents that tell everyone everything."""
    db = tools_client.app.state.db
    inst = instance("hr_leave", 0)
    template = LocalDriver.create(db, "hr_leave", 0)
    for agent, kind in (
        ("every_verdict", "world.budget"),
        ("digest", "say.none"),
    ):
        driver = template.fork()
        run_agent(driver, inst, AGENTS[agent])
        report = driver.report()
        tripped = [c.id for e in report.events for c in e.checks if c.kind == kind and not c.passed]
        assert tripped, (agent, kind)


def test_reads_never_change_a_world(tools_client) -> None:
    """Reading every app, through MCP and through the REST routes (Slack's and Notion's
    POST reads included), of a world that never set them up changes nothing."""
    from services.tools.events.marks import agent_changes

    db = tools_client.app.state.db
    for scenario in ("empty", "legal_contracts"):
        w = create_world(tools_client, scenario, 0)
        driver = LocalDriver(db, w.id)
        before = tools_client.get(f"/worlds/{w.id}/state").json()["full_hash"]
        AGENTS["read_only"](Inbox(driver, "x@y.test"))
        base = f"/worlds/{w.id}"
        for method, path, body in [
            ("GET", "/gmail/v1/users/me/profile", None),
            ("GET", "/gmail/v1/users/me/labels", None),
            ("GET", "/calendar/v3/users/me/calendarList", None),
            ("GET", "/calendar/v3/calendars/primary/events", None),
            ("POST", "/notion/v1/search", {}),
            ("GET", "/notion/v1/users", None),
            ("POST", "/slack/api/conversations.list", None),
            ("POST", "/slack/api/users.list", None),
            ("POST", "/slack/api/auth.test", None),
        ]:
            resp = tools_client.request(
                method,
                base + path,
                headers={**w.auth, "Notion-Version": "2022-06-28"},
                json=body,
            )
            assert resp.status_code == 200, (path, resp.text)
        with db.session() as s:
            assert agent_changes(s, w.id) == {}
        after = tools_client.get(f"/worlds/{w.id}/state").json()["full_hash"]
        assert after == before, scenario


def test_oracle_over_http_and_its_replayable_plan(tools_client) -> None:
    """The oracle through the MCP endpoint; then the plan the API serves, replayed as plain
    tool calls on a fresh world, passes every event too."""
    name, seed = "sales_crm", 2
    inst = instance(name, seed)
    w = create_world(tools_client, name, seed)
    run_oracle(HTTPDriver(tools_client, w.id, w.token), inst)
    report = tools_client.get(f"/worlds/{w.id}/checks").json()
    assert report["events_passed"] == report["events_total"] == len(inst.events)

    resp = tools_client.get(f"/scenarios/{name}/oracle", params={"seed": seed})
    assert resp.status_code == 200, resp.text
    plan = OraclePlan.model_validate(resp.json())
    assert plan.steps and all(s.tool and s.at for s in plan.steps)
    assert {s.app for s in plan.steps} == {"gmail", "slack", "notion", "calendar"}
    fresh = create_world(tools_client, name, seed)
    replay(HTTPDriver(tools_client, fresh.id, fresh.token), plan.steps, plan.end)
    report = tools_client.get(f"/worlds/{fresh.id}/checks").json()
    assert report["events_passed"] == report["events_total"]
    assert tools_client.get("/scenarios/nope/oracle").status_code == 404


def test_scenario_catalogue_routes(tools_client) -> None:
    names = {s["name"] for s in tools_client.get("/scenarios").json()["scenarios"]}
    assert set(LIBRARY) <= names
    inst = tools_client.get("/scenarios/hr_leave", params={"seed": 4}).json()
    assert inst["seed"] == 4 and len(inst["events"]) >= 40
    assert tools_client.get("/scenarios/nope").status_code == 404


def test_generated_pages_are_current() -> None:
    """Each scenario's page (event graph in Mermaid, every event's checks) and the index are
    what ``python -m services.tools.scenarios.docs`` generates today."""
    from services.tools.scenarios import docs

    for name in LIBRARY:
        text = (docs.PAGES / f"{name}.md").read_text()
        assert "```mermaid" in text and "-->|" in text
        assert text == docs.page(instance(name, docs.SEED)), f"{name}: regenerate the pages"
    assert (docs.HERE / "README.md").read_text() == docs.index()


def test_the_older_oracle_entry_point_still_solves(tools_client) -> None:
    """``scenarios.story.run_oracle(oracle, end, WorldAPI)`` (the older entry point) runs
    today's oracle over HTTP; every step also carries its app-level ``do`` form."""
    from services.tools.scenarios.story import run_oracle as older

    inst = instance("personal_admin", 1)
    assert all(step.get("do") for steps in inst.oracle.values() for step in steps)
    w = create_world(tools_client, "personal_admin", 1)
    older(inst.oracle, inst.end, w.api)
    report = tools_client.get(f"/worlds/{w.id}/checks").json()
    assert report["events_passed"] == report["events_total"]
