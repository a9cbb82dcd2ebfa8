"""Lateness in Canvas follows the times, and the appeal check reads what was explained.

A seeded submission is late because it was handed in after the assignment's ``due_at`` (the
seeds had late submissions to assignments with no due date); the "explained the late penalty"
check wants the word "late" (a substring test passed on "calculated") and the penalty's
figure or rule."""

from __future__ import annotations

import json

import pytest

from services.tools.apps.canvas.ops import _says
from services.tools.scenarios import get_scenario
from tests.tools.conftest import ToolsWorld, create_world
from tests.tools.test_canvas import check, effects, mcp

EXPLAINED = dict(
    to=["prof@uni.test"], says=["late"], says_any=["10%", "16.2", "penalty", "deduction"]
)


@pytest.fixture
def inbox(world: ToolsWorld) -> tuple[ToolsWorld, int]:
    effects(
        world,
        ("canvas.setup", {"name": "Tia TA", "email": "ta@uni.test"}),
        (
            "canvas.course",
            {
                "name": "Statistics",
                "code": "STAT2",
                "agent_role": "TaEnrollment",
                "members": [{"email": "prof@uni.test", "name": "Prof Lee"}],
            },
        ),
        ("canvas.message", {"from": "prof@uni.test", "subject": "HW1", "body": "Why 16.2?"}),
    )
    convo = json.loads(mcp(world, "canvas_list_conversations")["content"][0]["text"])[0]["id"]
    return world, convo


def test_the_appeal_check_reads_words_and_the_penalty_not_substrings(inbox):
    w, convo = inbox
    for body in (
        "I calculated it again and it stands.",  # held "late" as a substring
        "The translated rubric is attached.",
        "It was late.",  # the word, but neither the penalty's figure nor its rule
        "The 110% cap and the 16.25 average are unrelated.",
    ):
        mcp(w, "canvas_add_message", conversation_id=convo, body=body)
        assert not check(w, "canvas.messaged", **EXPLAINED), body
    mcp(
        w,
        "canvas_add_message",
        conversation_id=convo,
        body="Your report came in late, so 10% comes off: 18 becomes 16.2.",
    )
    assert check(w, "canvas.messaged", **EXPLAINED)


@pytest.mark.parametrize(
    ("text", "phrase", "said"),
    [
        ("It was LATE.", "late", True),
        ("calculated", "late", False),
        ("a 10 % cut", "10%", False),
        ("a 10% cut", "10%", True),
        ("ten  percent off", "ten percent", True),
        ("16.2.", "16.2", True),
        ("16.25", "16.2", False),
    ],
)
def test_says_matches_whole_words(text: str, phrase: str, said: bool):
    assert _says(text, phrase) is said


def test_seeded_assignments_have_due_dates_and_lateness_follows_them(tools_client):
    inst = get_scenario("ta_workload").build(0)
    due = {e.args["name"]: e.args.get("due_at") for e in inst.setup if e.op == "canvas.assignment"}
    assert due and all(due.values()), due
    w = create_world(tools_client, "ta_workload")
    base = f"/worlds/{w.id}/canvas/api/v1"
    courses = w.client.get(f"{base}/courses", headers=w.auth).json()
    seen = {True: 0, False: 0}
    for c in courses:
        for a in w.client.get(f"{base}/courses/{c['id']}/assignments", headers=w.auth).json():
            assert a["due_at"] is not None, a
            subs = w.client.get(
                f"{base}/courses/{c['id']}/assignments/{a['id']}/submissions", headers=w.auth
            ).json()
            for sub in subs:
                if sub.get("submitted_at") is None:
                    continue
                assert sub["late"] is (sub["submitted_at"] > a["due_at"]), (a, sub)
                seen[sub["late"]] += 1
    assert seen[True] and seen[False], seen  # both kinds are seeded


def test_a_late_mark_the_times_do_not_bear_out_is_refused(world: ToolsWorld):
    effects(
        world,
        ("canvas.setup", {"name": "Tia TA", "email": "ta@uni.test"}),
        ("canvas.course", {"name": "Art", "code": "ART1", "members": [{"email": "x@uni.test"}]}),
        ("canvas.assignment", {"course": "ART1", "name": "Sketch", "points": 5}),
    )
    with pytest.raises(ValueError, match="marked late"):
        effects(
            world,
            (
                "canvas.submission",
                {
                    "course": "ART1",
                    "assignment": "Sketch",
                    "student": "x@uni.test",
                    "body": "b",
                    "late": True,
                },
            ),
        )
