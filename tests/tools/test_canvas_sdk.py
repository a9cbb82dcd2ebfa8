"""Contract: the official ``canvasapi`` client (3.6.0) works unchanged against the mock Canvas:
courses, modules, assignments, submitting, grading, announcements, conversations and calendar
events, with Link-header pagination and Canvas's errors."""

from __future__ import annotations

import pytest
from canvasapi import Canvas
from canvasapi.exceptions import BadRequest, InvalidAccessToken, ResourceDoesNotExist, Unauthorized

from services.tools.apps.canvas import actions as canvas
from services.tools.apps.canvas import coursework
from tests.tools.apps_conftest import create_world, service_server, world_ctx

pytestmark = pytest.mark.filterwarnings("ignore:Canvas may respond unexpectedly:UserWarning")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with service_server(tmp_path_factory.mktemp("canvas-sdk")) as (app, url):
        yield app, url


def seed_world(app, wid: str, role: str) -> dict[str, int]:
    """Two courses (the agent in one as ``role``), a teacher, three students, an assignment."""
    with world_ctx(app, wid) as ctx:
        canvas.setup(ctx, name="Sam Agent", email="sam@uni.test")
        me = canvas.agent_id(ctx)
        bio = canvas.create_course(ctx, name="Biology 101", course_code="BIO101")["id"]
        other = canvas.create_course(ctx, name="Chemistry", course_code="CHEM1")["id"]
        prof = canvas.create_user(ctx, name="Prof Ada", email="ada@uni.test")["id"]
        canvas.enroll(ctx, bio, prof, "TeacherEnrollment")
        canvas.enroll(ctx, other, prof, "TeacherEnrollment")
        canvas.enroll(ctx, bio, me, role)
        students = []
        for i in range(3):
            s = canvas.create_user(ctx, name=f"Student {i}", email=f"s{i}@uni.test")["id"]
            canvas.enroll(ctx, bio, s, "StudentEnrollment")
            students.append(s)
        lab = coursework.create_assignment(
            ctx, bio, name="Lab report 1", due_at="2030-01-01T12:00:00Z", points_possible=20
        )["id"]
        for i in range(12):
            coursework.create_assignment(ctx, bio, name=f"Quiz {i}", points_possible=5)
        if role == "TaEnrollment":
            coursework.submit(
                ctx, bio, lab, "online_text_entry", body="my lab", user_id=students[0]
            )
    return {"bio": bio, "other": other, "prof": prof, "lab": lab, "s0": students[0], "me": me}


def client_as(server, role: str) -> tuple[Canvas, dict[str, int]]:
    app, url = server
    wid, token = create_world(url)
    ids = seed_world(app, wid, role)
    return Canvas(f"{url}/worlds/{wid}/canvas", token), ids


@pytest.fixture
def student(server):
    return client_as(server, "StudentEnrollment")


@pytest.fixture
def ta(server):
    return client_as(server, "TaEnrollment")


def test_student_courses_assignments_submit(student):
    client, ids = student
    me = client.get_current_user()
    assert me.name == "Sam Agent" and me.id == ids["me"]
    courses = list(client.get_courses())
    assert [c.name for c in courses] == ["Biology 101"]  # not the course it is not in
    assert courses[0].enrollments[0]["type"] == "student"
    course = client.get_course(ids["bio"])
    work = list(course.get_assignments(per_page=5))  # 13 assignments over 3 Link-header pages
    assert len(work) == 13 and work[0].name == "Lab report 1"
    lab = course.get_assignment(ids["lab"])
    sub = lab.submit({"submission_type": "online_text_entry", "body": "<p>My report</p>"})
    assert sub.workflow_state == "submitted" and sub.body == "<p>My report</p>"
    assert not sub.late  # due in 2030 on a 2026 clock
    mine = lab.get_submission("self")
    assert mine.attempt == 1 and mine.user_id == ids["me"]
    with pytest.raises(BadRequest):
        lab.submit({"submission_type": "online_url", "url": "https://x.test"})  # not allowed here
    with pytest.raises(Unauthorized):
        lab.get_submission(ids["s0"])  # another student's work
    with pytest.raises(Unauthorized):
        client.get_course(ids["other"])
    with pytest.raises(ResourceDoesNotExist):
        course.get_assignment(999999)


def test_ta_grades_and_announces(ta):
    client, ids = ta
    course = client.get_course(ids["bio"])
    lab = course.get_assignment(ids["lab"])
    subs = list(lab.get_submissions())
    assert [s.user_id for s in subs] == [ids["s0"]]
    graded = subs[0].edit(submission={"posted_grade": "85%"}, comment={"text_comment": "Good"})
    assert graded.score == 17.0 and graded.workflow_state == "graded"
    assert graded.submission_comments[0]["comment"] == "Good"
    grades = {
        e.user_id: e.grades["current_score"]
        for e in course.get_enrollments()
        if hasattr(e, "grades")
    }
    assert grades[ids["s0"]] == 85.0
    students = list(course.get_users(enrollment_type=["student"]))
    assert len(students) == 3
    with pytest.raises(BadRequest):
        subs[0].edit(submission={"posted_grade": "excellent"})
    course.create_discussion_topic(
        title="Lab moved", message="The lab is on Friday", is_announcement=True
    )
    news = list(client.get_announcements(context_codes=[course]))
    assert [a.title for a in news] == ["Lab moved"]
    module = course.create_module(module={"name": "Week 1"})
    module.create_module_item(
        module_item={"title": "Lab report 1", "type": "Assignment", "content_id": ids["lab"]}
    )
    assert [m.title for m in module.get_module_items()] == ["Lab report 1"]
    assert [m.name for m in course.get_modules()] == ["Week 1"]


def test_conversations_and_calendar(ta):
    client, ids = ta
    sent = client.create_conversation(
        recipients=[str(ids["prof"])], body="Grades are in.", subject="Lab 1"
    )
    assert len(sent) == 1 and sent[0].subject == "Lab 1"
    convo = client.get_conversation(sent[0].id)
    convo.add_message(body="All 3 graded.")
    again = client.get_conversation(sent[0].id)
    assert [m["body"] for m in again.messages] == ["All 3 graded.", "Grades are in."]
    assert [c.id for c in client.get_conversations()] == [sent[0].id]
    with pytest.raises(BadRequest):
        client.create_conversation(recipients=[], body="nobody")
    event = client.create_calendar_event(
        {
            "context_code": f"course_{ids['bio']}",
            "title": "Office hours",
            "start_at": "2026-03-04T15:00:00Z",
            "end_at": "2026-03-04T16:00:00Z",
        }
    )
    listed = list(client.get_calendar_events(context_codes=[f"course_{ids['bio']}"]))
    assert [e.id for e in listed] == [event.id] and listed[0].title == "Office hours"
    with pytest.raises(BadRequest):
        client.create_calendar_event({"context_code": "user_999", "title": "x", "start_at": "soon"})


def test_bad_token(server):
    _, url = server
    wid, _ = create_world(url)
    with pytest.raises(InvalidAccessToken):
        Canvas(f"{url}/worlds/{wid}/canvas", "wrong-token").get_current_user().name  # noqa: B018
