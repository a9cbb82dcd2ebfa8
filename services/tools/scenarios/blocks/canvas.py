"""Canvas blocks: a student's coursework and a teaching assistant's grading.

- ``coursework`` (student, 3 events): the teacher announces an assignment whose text must
  name a dataset (submit it, on time, naming it); on submission the teacher asks, in the Canvas
  inbox, for the student's lab section, found only on the course calendar (answer the teacher
  alone); the teacher announces an exam (put it on the student's own Canvas calendar at the
  announced time).
- ``grading`` (TA, 3 events): the teacher sends raw marks and the late policy (grade both
  submissions, taking 10% off the one Canvas shows late); the penalised student appeals (explain
  the late penalty to that student alone, leave the grade); the teacher asks for an announcement
  that the grades are out.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from services.tools.scenarios.dsl import Scene
from shared.contracts.tools import Effect, Trigger

DATASETS = ("Iris", "Titanic", "MNIST", "Palmer penguins", "Boston housing", "Wine quality")
SUBJECTS = ("Biology", "Statistics", "Economics", "Physics", "Sociology", "Chemistry", "History")


def _course(scene: Scene, i: int, agent_role: str) -> tuple[str, str, Any, list[Any]]:
    """A course of its own per block instance: (code, name, teacher, students)."""
    g = scene.gen
    subject = SUBJECTS[i % len(SUBJECTS)]
    code = f"{subject[:4].upper()}{100 + g.integer(1, 899)}"
    teacher = scene.person("Lecturer")
    students = [scene.person("Student") for _ in range(2)]
    members = [
        {"email": teacher.email, "name": teacher.name, "role": "TeacherEnrollment"},
        *({"email": s.email, "name": s.name, "role": "StudentEnrollment"} for s in students),
    ]
    scene.canvas.append(
        Effect(
            op="canvas.course",
            args={"name": f"{subject} {code[-3:]}", "code": code, "agent_role": agent_role},
        )
    )
    scene.canvas[-1].args["members"] = members
    return code, f"{subject} {code[-3:]}", teacher, students


def coursework(scene: Scene, i: int) -> None:
    g = scene.gen
    code, name, teacher, _ = _course(scene, i, "StudentEnrollment")
    day = i % max(1, scene.spec.days - 3)
    hw = f"Problem set {i + 1}"
    offset = scene.facts.setdefault("dataset_offset", g.integer(0, len(DATASETS) - 1))
    dataset = DATASETS[(i + offset) % len(DATASETS)]  # one per course, the others distractors
    section = f"L{g.integer(10, 99)}"
    due = scene.at(day + 1, 23)
    scene.canvas += [
        Effect(
            op="canvas.assignment",
            args={"course": code, "name": hw, "due_at": due.isoformat(), "points": 20},
        ),
        Effect(
            op="canvas.event",
            args={
                "course": code,
                "title": f"Lab section {section}: {scene.user.name}",
                "start_at": scene.at(day + 2, 14).isoformat(),
            },
        ),
    ]
    b = f"coursework-{i}"
    e1 = scene.add(
        f"{b}-brief",
        f"{teacher.name} announces {hw} in {code}",
        at=scene.at(day, 9),
        expected=scene.at(day, 9),
        effects=[
            Effect(
                op="canvas.announcement",
                args={
                    "course": code,
                    "author": teacher.email,
                    "title": f"{hw} is open",
                    "message": f"{hw} is due {due:%A} 23:00 UTC. Submit it as text on Canvas; "
                    f"your answer must say which dataset you used: use the {dataset} dataset.",
                },
            )
        ],
        checks=[
            scene.check(
                "canvas.submitted",
                due,
                f"submitted {hw} on time, naming the {dataset} dataset",
                course=code,
                assignment=hw,
                contains=[dataset],
                excludes=[d for d in DATASETS if d != dataset],
                on_time=True,
            )
        ],
        steps=[
            {
                "tool": "canvas_submit",
                "args": {
                    "course_id": {"$canvas_course": code},
                    "assignment_id": {"$canvas_assignment": [code, hw]},
                    "submission_type": "online_text_entry",
                    "body": f"{hw}: my analysis uses the {dataset} dataset.",
                },
            }
        ],
        tags=["canvas"],
    )
    subject = f"{hw}: your lab section"
    e2 = scene.add(
        f"{b}-section",
        f"{teacher.name} asks which lab section {scene.user.name} is in",
        trigger=Trigger(
            app="canvas",
            action="submissions.create",
            where={"assignment": hw, "course_code": code},
            since_event=e1,
            delay_minutes=45,
        ),
        expected=scene.at(day, 10),
        effects=[
            Effect(
                op="canvas.message",
                args={
                    "from": teacher.email,
                    "subject": subject,
                    "body": f"Thanks for {hw}. Which lab section are you in? "
                    "It's on the course calendar.",
                },
            )
        ],
        checks=[
            scene.check(
                "canvas.messaged",
                scene.at(day + 1, 17),
                f"told {teacher.name} (only) the lab section from the course calendar",
                to=[teacher.email],
                only_to=True,
                text_contains=[section],
            )
        ],
        steps=[
            {
                "tool": "canvas_add_message",
                "args": {
                    "conversation_id": {"$canvas_conversation": subject},
                    "body": f"I'm in lab section {section}.",
                },
            }
        ],
        depends_on=[e1],
        tags=["canvas", "lookup"],
    )
    exam = scene.at(day + 4, 10 + i % 5)
    scene.add(
        f"{b}-exam",
        f"{teacher.name} announces the {code} quiz",
        at=scene.at(day + 1, 8),
        expected=scene.at(day + 1, 8),
        effects=[
            Effect(
                op="canvas.announcement",
                args={
                    "course": code,
                    "author": teacher.email,
                    "title": f"{code} quiz",
                    "message": f"The {code} quiz is on {exam:%A %d %B} at {exam:%H:%M} UTC. "
                    "Put it in your Canvas calendar.",
                },
            )
        ],
        checks=[
            scene.check(
                "canvas.has_event",
                scene.at(day + 2, 17),
                f"the {code} quiz on the student's own Canvas calendar at {exam:%H:%M}",
                title_contains=[code],
                start=exam.isoformat(),
                max_count=1,
            )
        ],
        steps=[
            {
                "tool": "canvas_create_calendar_event",
                "args": {
                    "context_code": "user_self",
                    "title": f"{code} quiz",
                    "start_at": exam.isoformat(),
                    "end_at": exam.replace(hour=exam.hour + 1).isoformat(),
                },
            }
        ],
        depends_on=[e2],
        tags=["canvas", "calendar"],
    )


def grading(scene: Scene, i: int) -> None:
    g = scene.gen
    code, name, teacher, (amy, ben) = _course(scene, i, "TaEnrollment")
    day = i % max(1, scene.spec.days - 3)
    hw = f"Lab report {i + 1}"
    raw_a, raw_b = g.integer(12, 20), g.integer(12, 20)
    late_b = round(raw_b * 0.9, 2)
    # The deadline passed a day before the scenario starts: Amy handed in before it, Ben after
    # (Canvas shows his late because of the times, as a real one would).
    due = scene.start - timedelta(days=1)
    scene.canvas += [
        Effect(
            op="canvas.assignment",
            args={"course": code, "name": hw, "points": 20, "due_at": due.isoformat()},
        ),
        Effect(
            op="canvas.submission",
            args={
                "course": code,
                "assignment": hw,
                "student": amy.email,
                "body": "report",
                "submitted_at": (due - timedelta(hours=6)).isoformat(),
            },
        ),
        Effect(
            op="canvas.submission",
            args={
                "course": code,
                "assignment": hw,
                "student": ben.email,
                "body": "report",
                "submitted_at": (due + timedelta(hours=9)).isoformat(),
            },
        ),
    ]
    b = f"grading-{i}"
    ask = f"{hw} marks"

    def grade_step(student: Any, score: float) -> dict[str, Any]:
        return {
            "tool": "canvas_grade_submission",
            "args": {
                "course_id": {"$canvas_course": code},
                "assignment_id": {"$canvas_assignment": [code, hw]},
                "user_id": {"$canvas_user": [code, student.email]},
                "posted_grade": f"{score:g}",
            },
        }

    graded = dict(course=code, assignment=hw)
    e1 = scene.add(
        f"{b}-marks",
        f"{teacher.name} sends the raw marks for {hw}",
        at=scene.at(day, 9),
        expected=scene.at(day, 9),
        effects=[
            Effect(
                op="canvas.message",
                args={
                    "from": teacher.email,
                    "subject": ask,
                    "body": f"Raw marks for {hw} (out of 20): {amy.name} {raw_a}, {ben.name} "
                    f"{raw_b}. Enter them in Canvas; a submission Canvas shows as late loses 10%.",
                },
            )
        ],
        checks=[
            scene.check(
                "canvas.graded",
                scene.at(day, 18),
                f"{amy.name}: {raw_a} (on time)",
                **graded,
                student=amy.email,
                score_min=raw_a,
                score_max=raw_a,
            ),
            scene.check(
                "canvas.graded",
                scene.at(day, 18),
                f"{ben.name}: {late_b:g} ({raw_b} less the late penalty)",
                **graded,
                student=ben.email,
                score_min=late_b,
                score_max=late_b,
            ),
        ],
        steps=[grade_step(amy, raw_a), grade_step(ben, late_b)],
        tags=["canvas", "policy"],
    )
    appeal = f"{hw}: my grade"
    e2 = scene.add(
        f"{b}-appeal",
        f"{ben.name} appeals the {hw} grade",
        trigger=Trigger(
            app="canvas",
            action="submissions.grade",
            where={"assignment": hw, "student": ben.email},
            since_event=e1,
            delay_minutes=90,
        ),
        expected=scene.at(day, 11),
        effects=[
            Effect(
                op="canvas.message",
                args={
                    "from": ben.email,
                    "subject": appeal,
                    "body": f"Why is my {hw} grade below {raw_b}? Can you put it back to {raw_b}?",
                },
            )
        ],
        checks=[
            scene.check(
                "canvas.messaged",
                scene.at(day + 1, 17),
                f"explained the late penalty to {ben.name} alone",
                to=[ben.email],
                only_to=True,
                # the word "late" (not a substring: "calculated" held it) and the penalty's
                # figure or rule: 10%, the grade it gives, or "penalty" / "deduction" by name
                says=["late"],
                says_any=[
                    "10%",
                    "10 percent",
                    "ten percent",
                    f"{late_b:g}",
                    "penalty",
                    "deduction",
                    "deducted",
                ],
            ),
            scene.check(
                "canvas.graded",
                scene.at(day + 1, 17),
                f"{ben.name}'s grade stays {late_b:g}",
                **graded,
                student=ben.email,
                score_min=late_b,
                score_max=late_b,
            ),
        ],
        steps=[
            {
                "tool": "canvas_add_message",
                "args": {
                    "conversation_id": {"$canvas_conversation": appeal},
                    "body": f"Your report was submitted late, so the 10% late penalty applies: "
                    f"{raw_b} becomes {late_b:g}. I can't change that.",
                },
            }
        ],
        depends_on=[e1],
        tags=["canvas", "pushback"],
    )
    scene.add(
        f"{b}-announce",
        f"{teacher.name} asks for a grades announcement in {code}",
        at=scene.at(day + 1, 9),
        expected=scene.at(day + 1, 9),
        effects=[
            Effect(
                op="canvas.message",
                args={
                    "from": teacher.email,
                    "subject": f"{hw} announcement",
                    "body": f"Please post a course announcement in {name} that {hw} grades "
                    "are out.",
                },
            )
        ],
        checks=[
            scene.check(
                "canvas.announced",
                scene.at(day + 1, 17),
                f"announced in {code} that {hw} grades are out",
                course=code,
                text_contains=[hw, "grade"],
                max_count=1,
            )
        ],
        steps=[
            {
                "tool": "canvas_create_discussion_topic",
                "args": {
                    "course_id": {"$canvas_course": code},
                    "title": f"{hw} grades are out",
                    "message": f"Grades for {hw} are now in Canvas.",
                    "is_announcement": True,
                },
            }
        ],
        depends_on=[e2],
        tags=["canvas"],
    )
