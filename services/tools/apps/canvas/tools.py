"""Canvas MCP tools, one per REST operation an assistant needs, with Canvas's own field names.

Each tool is its arguments model (its docstring the description) passed on to the action of
the same meaning, so the MCP path obeys the REST path's rules (roles, validation, the log).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from services.tools.apps.canvas import actions as A
from services.tools.apps.canvas import comms as C
from services.tools.apps.canvas import coursework as W
from services.tools.mcp.registry import NoArgs, forward

APP = "canvas"


class Course(BaseModel):
    """Get one course the user is enrolled in (with the user's enrollment in it)."""

    course_id: int = Field(description="The course's id.")


class CourseUsers(Course):
    """List a course's people, optionally only some roles."""

    enrollment_type: list[str] | None = Field(
        None, description='Roles to keep: "student", "ta", "teacher".'
    )


class Assignment(Course):
    """Get one assignment (due date, points, allowed submission types)."""

    assignment_id: int


class CreateAssignment(Course):
    """Create an assignment (teachers and TAs)."""

    name: str
    description: str = ""
    due_at: str | None = Field(None, description="ISO 8601, e.g. 2026-03-06T23:59:00Z.")
    points_possible: float = 100
    submission_types: list[str] | None = Field(None, description='e.g. ["online_text_entry"].')


class Submit(Assignment):
    """Submit the user's own work to an assignment (students)."""

    submission_type: str = Field(description="online_text_entry or online_url.")
    body: str | None = Field(None, description="The text, for online_text_entry.")
    url: str | None = Field(None, description="The link, for online_url.")
    comment: str | None = None


class Submission(Assignment):
    """Get one student's submission ("self" for the user's own)."""

    user_id: str = "self"


class Grade(Assignment):
    """Grade and/or comment on a student's submission (teachers and TAs)."""

    user_id: int
    posted_grade: str | None = Field(None, description='Points ("17"), percent ("85%") or letter.')
    text_comment: str | None = None


class Module(Course):
    """List a module's items."""

    module_id: int


class Topics(Course):
    """List a course's discussion topics, newest first."""

    only_announcements: bool = False


class Announce(Course):
    """Post a discussion topic, or an announcement (teachers and TAs) to the whole course."""

    title: str
    message: str
    is_announcement: bool = True


class Announcements(BaseModel):
    """List announcements of the given courses (all the user's courses if none), newest first."""

    context_codes: list[str] | None = Field(None, description='e.g. ["course_12"].')


class Conversations(BaseModel):
    """List the user's inbox conversations, latest first."""

    scope: str | None = Field(None, description="unread, sent or inbox (default).")


class Conversation(BaseModel):
    """Read one conversation with its messages (marks it read)."""

    conversation_id: int


class NewConversation(BaseModel):
    """Send a new message (a conversation) to users (ids) or a whole course (course_<id>)."""

    recipients: list[str]
    body: str
    subject: str = ""


class Reply(Conversation):
    """Reply in an existing conversation (to all its participants)."""

    body: str


class NewEvent(BaseModel):
    """Put an event on a course calendar (course_<id>, staff) or the user's own (user_<id>)."""

    context_code: str
    title: str
    start_at: str = Field(description="ISO 8601.")
    end_at: str | None = None
    description: str = ""
    location_name: str = ""


class Events(BaseModel):
    """List calendar events of the given contexts (the user's own by default) in a date range."""

    context_codes: list[str] | None = None
    start_date: str | None = None
    end_date: str | None = None


class Current(NoArgs):
    """The user this token acts as."""


class MyCourses(NoArgs):
    """List the courses the user is enrolled in, with the user's role in each."""


forward(APP, "canvas_get_self", Current, A.current_user, read_only=True)
forward(APP, "canvas_list_courses", MyCourses, A.list_courses, read_only=True)
forward(APP, "canvas_get_course", Course, A.get_course, read_only=True)
forward(APP, "canvas_list_users", CourseUsers, A.list_users, read_only=True)
forward(
    APP,
    "canvas_list_enrollments",
    Course,
    A.list_enrollments,
    read_only=True,
    description="List a course's enrollments with each student's current grade.",
)
forward(
    APP,
    "canvas_list_modules",
    Course,
    W.list_modules,
    read_only=True,
    description="List a course's modules.",
)
forward(APP, "canvas_list_module_items", Module, W.list_module_items, read_only=True)
forward(
    APP,
    "canvas_list_assignments",
    Course,
    W.list_assignments,
    read_only=True,
    description="List a course's assignments.",
)
forward(APP, "canvas_get_assignment", Assignment, W.get_assignment, read_only=True)
forward(APP, "canvas_create_assignment", CreateAssignment, W.create_assignment)
forward(
    APP,
    "canvas_list_submissions",
    Assignment,
    W.list_submissions,
    read_only=True,
    description="List an assignment's submissions (staff see all; a student its own).",
)
forward(APP, "canvas_get_submission", Submission, W.get_submission, read_only=True)
forward(APP, "canvas_submit", Submit, W.submit)
forward(APP, "canvas_grade_submission", Grade, W.grade)
forward(APP, "canvas_list_discussion_topics", Topics, C.list_topics, read_only=True)
forward(APP, "canvas_create_discussion_topic", Announce, C.create_topic)
forward(APP, "canvas_list_announcements", Announcements, C.list_announcements, read_only=True)
forward(APP, "canvas_list_conversations", Conversations, C.list_conversations, read_only=True)
forward(APP, "canvas_get_conversation", Conversation, C.get_conversation)
forward(APP, "canvas_create_conversation", NewConversation, C.create_conversation)
forward(APP, "canvas_add_message", Reply, C.add_message)
forward(APP, "canvas_create_calendar_event", NewEvent, C.create_calendar_event)
forward(APP, "canvas_list_calendar_events", Events, C.list_calendar_events, read_only=True)
