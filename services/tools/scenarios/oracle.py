"""The oracle: the scripted expert that proves every check of a scenario satisfiable.

Its steps are MCP tool calls (the same tools an agent gets from ``/worlds/{id}/mcp``), taken
as each event fires. In a scenario instance the ids are symbolic; :func:`resolve` finds them
in the live world with read-only tools (``{"$msg": Message-ID}`` → the Gmail id, ``{"$dm":
email}`` → the DM channel, ``{"$db": title}``, ``{"$page": [db, title]}``, ``{"$notion_page":
title}`` (a page outside databases), ``{"$event": summary}``, Canvas's ``{"$canvas_course": code}`` and kin). :func:`run_oracle` returns the concrete plan it executed — a list of
:class:`~shared.contracts.tools.OracleStep` (simulated time, tool name, arguments) that a
harness can replay against a fresh world of the same scenario and seed, with the same result
(worlds are deterministic). ``GET /scenarios/{name}/oracle?seed=`` serves that plan.
"""

from __future__ import annotations

from typing import Any

from services.tools.mcp.registry import tools_for
from services.tools.scenarios.drive import Driver, ToolFailed, next_due
from shared.contracts.tools import OracleStep, ScenarioInstance


def resolve(driver: Driver, value: Any) -> Any:
    if isinstance(value, list):
        return [resolve(driver, v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and next(iter(value)).startswith("$"):
        key, arg = next(iter(value.items()))
        return _lookup(driver, key, arg)
    return {k: resolve(driver, v) for k, v in value.items()}


def _lookup(driver: Driver, key: str, arg: Any) -> str:
    if key == "$msg":
        found = driver.call("search_emails", {"query": f"rfc822msgid:{arg}", "maxResults": 1})
        if found["messages"]:
            return found["messages"][0]["id"]
    elif key == "$user":
        for m in driver.call("slack_get_users", {"limit": 200})["members"]:
            if (m.get("profile", {}).get("email") or "").lower() == arg.lower():
                return m["id"]
    elif key == "$dm":
        uid = _lookup(driver, "$user", arg)
        return driver.call("slack_open_dm", {"user_ids": [uid]})["channel"]["id"]
    elif key == "$db":
        hits = driver.call(
            "API-post-search",
            {"query": arg, "filter": {"property": "object", "value": "database"}},
        )["results"]
        if hits:
            return hits[0]["id"]
    elif key == "$page":
        db, title = arg
        rows = driver.call(
            "API-post-database-query",
            {
                "database_id": _lookup(driver, "$db", db),
                "filter": {"property": "Name", "title": {"equals": title}},
            },
        )["results"]
        if rows:
            return rows[0]["id"]
    elif key == "$notion_page":  # a page (not a database row) by its exact title
        hits = driver.call(
            "API-post-search", {"query": arg, "filter": {"property": "object", "value": "page"}}
        )["results"]
        for hit in hits:
            if hit.get("parent", {}).get("type") == "database_id":
                continue
            for prop in hit.get("properties", {}).values():
                if prop.get("type") == "title":
                    title = "".join(t.get("plain_text", "") for t in prop.get("title", []))
                    if title.strip() == arg:
                        return hit["id"]
    elif key == "$event":
        items = driver.call("search-events", {"query": arg})["items"]
        if items:
            return items[0]["id"]
    elif key.startswith("$canvas_"):
        found = _canvas_lookup(driver, key, arg)
        if found is not None:
            return found
    raise ToolFailed(f"oracle could not resolve {key} {arg!r}")


def _canvas_lookup(driver: Driver, key: str, arg: Any) -> Any:
    """Canvas ids by what a scenario names: a course code, ``[code, assignment name]``,
    ``[code, email]`` for a course member, an inbox conversation's subject (the latest)."""
    if key == "$canvas_course":
        for c in driver.call("canvas_list_courses", {}):
            if c["course_code"] == arg:
                return c["id"]
    elif key == "$canvas_assignment":
        cid = _canvas_lookup(driver, "$canvas_course", arg[0])
        for a in driver.call("canvas_list_assignments", {"course_id": cid}):
            if a["name"] == arg[1]:
                return a["id"]
    elif key == "$canvas_user":
        cid = _canvas_lookup(driver, "$canvas_course", arg[0])
        for u in driver.call("canvas_list_users", {"course_id": cid}):
            if u["email"] == arg[1].lower():
                return u["id"]
    elif key == "$canvas_conversation":
        for c in driver.call("canvas_list_conversations", {}):
            if c["subject"] == arg:
                return c["id"]
    return None


def run_oracle(driver: Driver, inst: ScenarioInstance) -> list[OracleStep]:
    """Advance from one due event to the next; after each, take the steps of every event
    that fired since (in firing order), until the scenario's end."""
    handled: set[str] = set()
    plan: list[OracleStep] = []
    for _ in range(100_000):
        events = driver.events()
        order = {e.event_id: i for i, e in enumerate(events)}
        fresh = sorted(
            (e for e in events if e.status == "fired" and e.event_id not in handled),
            key=lambda e: (e.fired_at, order[e.event_id]),
        )
        for ev in fresh:
            handled.add(ev.event_id)
            for step in inst.oracle.get(ev.event_id, []):
                args = resolve(driver, step["args"])
                driver.call(step["tool"], args)
                plan.append(
                    OracleStep(
                        event_id=ev.event_id,
                        at=driver.now(),
                        app=tools_for()[step["tool"]].app,
                        tool=step["tool"],
                        arguments=args,
                    )
                )
        if fresh:
            continue
        nxt = next_due(driver, inst.end)
        if nxt is None:
            if driver.now() < inst.end:
                driver.advance_to(inst.end)
                continue
            return plan
        driver.advance_to(nxt)
    raise RuntimeError("oracle did not finish")


def replay(driver: Driver, plan: list[OracleStep], end: Any) -> None:
    """Run a recorded plan: advance to each step's time, call its tool; then to ``end``."""
    for step in plan:
        if step.at > driver.now():
            driver.advance_to(step.at)
        driver.call(step.tool, step.arguments)
    if end > driver.now():
        driver.advance_to(end)
