"""Held-out agents for the scenario library, kept out of ``services`` so no check is tuned to
them: an oracle whose verdict sentences are rephrased (same decisions, recipients and
values), a broad-action agent that acts on every app Canvas included, and single-verdict
agents that send one fixed verdict to whoever writes.

The rephrasings below were written apart from the verdict reader's phrase list and its
paraphrase suite (``tests/tools/test_verdicts.py``); each oracle sentence that carries a
verdict is swapped for one of them, drawn per statement from a seeded RNG.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.tools.scenarios.baselines import Inbox, _post, _reply, mark_all_done
from services.tools.scenarios.drive import Driver, ToolFailed

YES = [
    "{ref} has my go-ahead:",
    "Good news, {ref} can go through:",
    "Happy to confirm {ref} is fine to proceed:",
    "You're cleared on {ref}:",
    "{ref} gets a yes from me:",
    "I can sign {ref} off:",
    "We're okay to proceed with {ref}:",
    "Yes, {ref} is accepted:",
]
NO = [
    "I'm afraid {ref} can't go ahead:",
    "Unfortunately I can't sign off {ref}:",
    "{ref} is a no, sorry:",
    "We won't be proceeding with {ref}:",
    "Sorry, {ref} has been turned down:",
    "I have to refuse {ref}:",
    "{ref} can't be accepted:",
    "No on {ref}, I'm afraid:",
]
LATE_YES = [
    "it can go ahead after all:",
    "you're cleared after all:",
    "it's a yes after all:",
    "it gets my go-ahead now:",
]
LATE_NO = [
    "it can't go ahead after all:",
    "I have to withdraw my approval:",
    "it's a no after all:",
    "it has to be turned down after all:",
]
FINAL_YES = [
    "{ref}: final answer is yes.",
    "{ref}: cleared, that's final.",
    "{ref}: go-ahead given (final).",
]
FINAL_NO = [
    "{ref}: final answer is no.",
    "{ref}: turned down, that's final.",
    "{ref}: not going ahead (final).",
]

_REF = r"(?P<ref>[A-Z]{1,5}-\d{3,5})"
RULES: list[tuple[re.Pattern[str], list[str]]] = [
    (re.compile(rf"{_REF} is approved:"), YES),
    (re.compile(rf"{_REF} is declined:"), NO),
    (re.compile(r"[Ii]t is approved after all:"), LATE_YES),
    (re.compile(r"I have to correct my earlier answer\. It is declined after all:"), LATE_NO),
    (re.compile(rf"{_REF}: approved \(final\)\."), FINAL_YES),
    (re.compile(rf"{_REF}: declined \(final\)\."), FINAL_NO),
]
TEXT_FIELDS = ("body", "text", "message")


def paraphrase(
    text: str, rng: random.Random, rules: list[tuple[re.Pattern[str], list[str]]] | None = None
) -> str:
    """The same statement with each verdict sentence said another way (in ``rules``' words:
    this module's own by default; the other held-out sets pass theirs)."""
    for pattern, forms in RULES if rules is None else rules:
        text = pattern.sub(
            lambda m, forms=forms: rng.choice(forms).format(ref=m.groupdict().get("ref", "")),
            text,
        )
    return text


@dataclass
class Paraphrasing:
    """A driver whose outgoing statements are paraphrased (everything else passes through).

    ``rephrase`` is the paraphrase applied (this module's ``paraphrase`` unless another set's
    is given, e.g. ``tests.tools.heldout_external.paraphrase_external``)."""

    inner: Driver
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    rewritten: int = 0
    rephrase: Callable[[str, random.Random], str] = paraphrase

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        out = dict(args)
        for key in TEXT_FIELDS:
            if isinstance(out.get(key), str):
                new = self.rephrase(out[key], self.rng)
                self.rewritten += new != out[key]
                out[key] = new
        return self.inner.call(tool, out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _try(driver: Driver, tool: str, args: dict[str, Any]) -> Any:
    try:
        return driver.call(tool, args)
    except ToolFailed:
        return None


def canvas_everything(driver: Driver) -> None:
    """On Canvas: submit every assignment, grade every submission full marks, answer every
    conversation, announce in every course (what a student or a TA could do in bulk)."""
    courses = _try(driver, "canvas_list_courses", {}) or []
    for c in courses:
        cid = c["id"]
        for a in _try(driver, "canvas_list_assignments", {"course_id": cid}) or []:
            _try(
                driver,
                "canvas_submit",
                {
                    "course_id": cid,
                    "assignment_id": a["id"],
                    "submission_type": "online_text_entry",
                    "body": f"{a['name']}: done, all work attached.",
                },
            )
            subs = _try(
                driver, "canvas_list_submissions", {"course_id": cid, "assignment_id": a["id"]}
            )
            for s in subs or []:
                if s.get("user_id") is None:
                    continue
                _try(
                    driver,
                    "canvas_grade_submission",
                    {
                        "course_id": cid,
                        "assignment_id": a["id"],
                        "user_id": s["user_id"],
                        "posted_grade": str(a.get("points_possible") or 100),
                    },
                )
        _try(
            driver,
            "canvas_create_discussion_topic",
            {"course_id": cid, "title": "Update", "message": "Everything is graded and done."},
        )
    for conv in _try(driver, "canvas_list_conversations", {}) or []:
        _try(driver, "canvas_add_message", {"conversation_id": conv["id"], "body": "All done."})


def broad_action(box: Inbox) -> None:
    """Acts on everything it sees once: answers every mail and message with a confident
    catch-all, marks every tracker row final, accepts every invitation, and submits, grades
    and answers everything on Canvas."""
    for mail in box.new_mail():
        _reply(box.driver, mail, "All sorted on my side: noted, handled and recorded.")
    for msg in box.new_slack():
        _post(box.driver, msg["channel"]["id"], "On it: handled and recorded.")
    mark_all_done(box)
    canvas_everything(box.driver)


def single_verdict(verdict: str):  # type: ignore[no-untyped-def]
    """Answers every mail and message once, always with the same verdict."""
    text = "Approved, go ahead." if verdict == "approve" else "Declined, sorry."

    def act(box: Inbox) -> None:
        for mail in box.new_mail():
            _reply(box.driver, mail, text)
        for msg in box.new_slack():
            _post(box.driver, msg["channel"]["id"], text)

    act.__name__ = f"single_{verdict}"
    return act


HELD_OUT = {
    "broad_action": broad_action,
    "single_approve": single_verdict("approve"),
    "single_decline": single_verdict("decline"),
}
