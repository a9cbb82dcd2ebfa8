"""Contract, continued: the ``canvasapi`` 3.6.0 calls that answered 404/405 before (issue 40)
work unchanged against the mock Canvas, each through the stock client: editing an assignment,
bulk grading, assignment groups, a course's submissions across assignments, a user by id
(profile, courses, assignments), upcoming events, discussion entries, tabs, pages, files and
quizzes; a student still sees only its own."""

from __future__ import annotations

import pytest
from canvasapi.exceptions import Unauthorized

from tests.tools.test_canvas_sdk import client_as, server  # noqa: F401 - the fixture

pytestmark = pytest.mark.filterwarnings("ignore:Canvas may respond unexpectedly:UserWarning")


@pytest.fixture(scope="module")
def ta(server):  # noqa: F811 - the imported fixture
    return client_as(server, "TaEnrollment")


@pytest.fixture(scope="module")
def student(server):  # noqa: F811
    return client_as(server, "StudentEnrollment")


def test_assignment_edit(ta):
    client, ids = ta
    lab = client.get_course(ids["bio"]).get_assignment(ids["lab"])
    edited = lab.edit(assignment={"name": "Lab report 1 (v2)", "due_at": "2030-02-01T12:00:00Z"})
    assert edited.name == "Lab report 1 (v2)" and edited.due_at == "2030-02-01T12:00:00Z"
    again = client.get_course(ids["bio"]).get_assignment(ids["lab"])
    assert again.name == "Lab report 1 (v2)"


def test_assignment_edit_is_staff_only(student):
    client, ids = student
    lab = client.get_course(ids["bio"]).get_assignment(ids["lab"])
    with pytest.raises(Unauthorized):
        lab.edit(assignment={"name": "mine"})


def test_submissions_bulk_update(ta):
    client, ids = ta
    lab = client.get_course(ids["bio"]).get_assignment(ids["lab"])
    progress = lab.submissions_bulk_update(
        grade_data={ids["s0"]: {"posted_grade": "18", "text_comment": "Good"}}
    )
    assert progress.workflow_state == "completed"
    sub = lab.get_submission(ids["s0"])
    assert sub.score == 18 and sub.submission_comments[-1]["comment"] == "Good"


def test_assignment_groups(ta):
    client, ids = ta
    course = client.get_course(ids["bio"])
    groups = list(course.get_assignment_groups(include=["assignments"]))
    assert len(groups) == 1 and len(groups[0].assignments) == 13
    assert course.get_assignment_group(groups[0].id).name == groups[0].name


def test_multiple_submissions(ta, student):
    client, ids = ta
    subs = list(client.get_course(ids["bio"]).get_multiple_submissions(student_ids="all"))
    assert {s.user_id for s in subs} == {ids["s0"]} and subs[0].assignment_id == ids["lab"]
    mine, sids = student
    assert list(mine.get_course(sids["bio"]).get_multiple_submissions(student_ids="all")) == []


def test_user_profile_by_id(ta):
    client, ids = ta
    profile = client.get_user(ids["s0"]).get_profile()
    assert profile["primary_email"] == "s0@uni.test"


def test_user_get_courses(ta):
    client, ids = ta
    assert [c.name for c in client.get_user(ids["me"]).get_courses()] == ["Biology 101"]
    # the teacher's other course is not the agent's to see
    assert [c.id for c in client.get_user(ids["prof"]).get_courses()] == [ids["bio"]]


def test_user_get_assignments(ta):
    client, ids = ta
    course = client.get_course(ids["bio"])
    work = list(client.get_user(ids["s0"]).get_assignments(course))
    assert len(work) == 13


def test_upcoming_events(ta):
    client, _ = ta
    upcoming = client.get_upcoming_events()
    assert any(
        e["type"] == "assignment" and e["title"].startswith("Lab report 1") for e in upcoming
    )


def test_topic_entries(ta):
    client, ids = ta
    course = client.get_course(ids["bio"])
    topic = course.create_discussion_topic(title="Lab questions", message="Ask here")
    assert list(course.get_discussion_topic(topic.id).get_topic_entries()) == []


@pytest.mark.parametrize("listing", ["get_pages", "get_files", "get_quizzes"])
def test_pages_files_quizzes_list_empty(ta, listing):
    client, ids = ta
    assert list(getattr(client.get_course(ids["bio"]), listing)()) == []


def test_tabs(ta):
    client, ids = ta
    labels = [t.label for t in client.get_course(ids["bio"]).get_tabs()]
    assert labels[0] == "Home" and "Assignments" in labels
