"""Canvas beyond the official client: the MCP tools obey the REST rules, scenario effects set a
course up, checks judge what the agent did (and fail when it did nothing), the agent's words
join the cross-app outbox, and bad input is Canvas's own 4xx."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.tools.context import open_world
from services.tools.events.engine import evaluate_check
from services.tools.events.ops.say import outbox
from services.tools.events.registry import EffectEnv, get_effect
from shared.contracts.tools import Check
from tests.tools.conftest import ToolsWorld

ENV = EffectEnv(event_id="setup")
TA = "ta@uni.test"


def effects(world: ToolsWorld, *steps: tuple[str, dict[str, Any]]) -> None:
    db = world.client.app.state.db
    with db.session() as s, open_world(s, world.id, actor="scenario") as ctx:
        for name, args in steps:
            get_effect(name)(ctx, args, ENV)
        s.commit()


def check(world: ToolsWorld, kind: str, **args: Any) -> bool:
    db = world.client.app.state.db
    with db.session() as s, open_world(s, world.id) as ctx:
        ok, _ = evaluate_check(ctx, Check(id="c", kind=kind, args=args))
    return ok


def mcp(world: ToolsWorld, name: str, **arguments: Any) -> dict[str, Any]:
    resp = world.client.post(
        f"/worlds/{world.id}/mcp",
        headers=world.auth,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        },
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["result"]


@pytest.fixture
def course(world: ToolsWorld) -> ToolsWorld:
    effects(
        world,
        ("canvas.setup", {"name": "Tia TA", "email": TA}),
        (
            "canvas.course",
            {
                "name": "Statistics",
                "code": "STAT2",
                "agent_role": "TaEnrollment",
                "members": [
                    {"email": "prof@uni.test", "name": "Prof Lee", "role": "TeacherEnrollment"},
                    {"email": "amy@uni.test", "name": "Amy"},
                    {"email": "ben@uni.test", "name": "Ben"},
                ],
            },
        ),
        ("canvas.assignment", {"course": "STAT2", "name": "HW1", "points": 10}),
        (
            "canvas.submission",
            {"course": "STAT2", "assignment": "HW1", "student": "amy@uni.test", "body": "p=0.03"},
        ),
        ("canvas.message", {"from": "prof@uni.test", "subject": "HW1", "body": "Grade HW1 please"}),
    )
    return world


def test_mcp_grade_message_and_checks(course: ToolsWorld):
    w = course
    graded = dict(course="STAT2", assignment="HW1", student="amy@uni.test", score_min=9)
    assert not check(w, "canvas.graded", **graded)  # nothing done yet
    assert check(
        w, "canvas.graded", course="STAT2", assignment="HW1", student="ben@uni.test", ungraded=True
    )
    courses = mcp(w, "canvas_list_courses")
    cid = json.loads(courses["content"][0]["text"])[0]["id"]
    aid = json.loads(mcp(w, "canvas_list_assignments", course_id=cid)["content"][0]["text"])[0][
        "id"
    ]
    subs = json.loads(
        mcp(w, "canvas_list_submissions", course_id=cid, assignment_id=aid)["content"][0]["text"]
    )
    amy = subs[0]["user_id"]
    bad = mcp(
        w,
        "canvas_grade_submission",
        course_id=cid,
        assignment_id=aid,
        user_id=amy,
        posted_grade="ten",
    )
    assert bad["isError"] and "posted_grade" in bad["content"][0]["text"]
    ok = mcp(
        w,
        "canvas_grade_submission",
        course_id=cid,
        assignment_id=aid,
        user_id=amy,
        posted_grade="9.5",
        text_comment="Nice work",
    )
    assert not ok["isError"], ok
    assert check(w, "canvas.graded", **graded, comment_contains="nice")
    assert not check(w, "canvas.graded", **graded, score_max=9)
    inbox = json.loads(mcp(w, "canvas_list_conversations")["content"][0]["text"])
    assert inbox[0]["workflow_state"] == "unread"
    assert not check(w, "canvas.messaged", to=["prof@uni.test"], text_contains="graded")
    mcp(w, "canvas_add_message", conversation_id=inbox[0]["id"], body="HW1 is graded.")
    assert check(w, "canvas.messaged", to=["prof@uni.test"], text_contains="graded")
    assert not check(w, "canvas.messaged", to=["ben@uni.test"])
    mcp(
        w,
        "canvas_create_discussion_topic",
        course_id=cid,
        title="HW1 back",
        message="Grades are up",
    )
    assert check(w, "canvas.announced", course="STAT2", text_contains="grades")
    db = w.client.app.state.db
    with db.session() as s, open_world(s, w.id) as ctx:
        said = [(st.app, sorted(st.to), st.text) for st in outbox(ctx)]
    assert ("canvas", ["prof@uni.test"], "HW1 is graded.") in said
    assert ("canvas", ["amy@uni.test"], "Nice work") in said
    state = w.state()["apps"]["canvas"]
    assert {c["course_code"] for c in state["courses"]} == {"STAT2"}


def test_student_cannot_grade_and_bad_input_is_4xx(world: ToolsWorld):
    effects(
        world,
        ("canvas.setup", {"name": "Sam", "email": "sam@uni.test"}),
        ("canvas.course", {"name": "Art", "code": "ART1", "members": [{"email": "x@uni.test"}]}),
        ("canvas.assignment", {"course": "ART1", "name": "Sketch", "points": 5}),
    )
    base = f"/worlds/{world.id}/canvas/api/v1"
    cid = world.client.get(f"{base}/courses", headers=world.auth).json()[0]["id"]
    aid = world.client.get(f"{base}/courses/{cid}/assignments", headers=world.auth).json()[0]["id"]
    for method, path, data in [
        (
            "PUT",
            f"courses/{cid}/assignments/{aid}/submissions/1",
            {"submission[posted_grade]": "5"},
        ),
        ("POST", f"courses/{cid}/assignments", {"assignment[name]": "Mine"}),
        (
            "POST",
            f"courses/{cid}/assignments/{aid}/submissions",
            {"submission[submission_type]": "online_text_entry"},
        ),
        (
            "POST",
            f"courses/{cid}/assignments/{aid}/submissions",
            {"submission[submission_type][x]": "y"},
        ),
        ("GET", "courses/abc", None),
        ("GET", "courses?page=0", None),
        ("GET", "calendar_events?start_date=yesterday", None),
        ("POST", "conversations", {"recipients[]": "424242", "body": "hi"}),
    ]:
        resp = world.client.request(method, f"{base}/{path}", headers=world.auth, data=data)
        assert 400 <= resp.status_code < 500, (path, resp.status_code, resp.text)
        assert resp.json()["errors"][0]["message"], resp.text
    assert not check(world, "canvas.submitted", course="ART1", assignment="Sketch")
    assert check(world, "canvas.submitted", course="ART1", assignment="Sketch", max_count=0)
    resp = world.client.post(
        f"{base}/courses/{cid}/assignments/{aid}/submissions",
        headers=world.auth,
        json={"submission": {"submission_type": "online_text_entry", "body": "a cat"}},
    )
    assert resp.status_code == 200, resp.text
    assert not check(
        world, "canvas.submitted", course="ART1", assignment="Sketch", excludes=["CAT"]
    )
    assert check(
        world, "canvas.submitted", course="ART1", assignment="Sketch", contains="cat", on_time=True
    )
