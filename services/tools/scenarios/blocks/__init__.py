"""The building blocks scenarios are composed of (the DSL's verbs; see ``dsl.py``).

Each block adds a small event graph to a :class:`~services.tools.scenarios.dsl.Scene`, with
checks a broad agent cannot satisfy by volume: decisions judged on what the assistant
committed to in that conversation, to exactly the right people, with values found elsewhere
(a policy mail, a Notion database) and distractors that must not appear.

- ``approval``: a request decided against a policy (6 events, a chain 4 deep): the request;
  an escalation if it waits past its deadline (averted by answering); the requester's
  follow-up, which branches on the verdict; late information from the owner that reverses
  the decision (the assistant must correct itself and the tracker); the requester's reaction;
  the owner's check on the final status.
- ``lookup``: a figure two sources disagree on (Notion is right, an old Slack post is stale);
  a correct answer makes the asker delegate a mail, whose reader asks for a Notion record.
- ``meeting``: book the earliest slot free on the calendar (no double-booking); the guest
  moves it (move, don't duplicate); a colleague asks to join.
- ``tracker``: bring a Notion tracker up to date from a status post (some done, one blocked,
  one unchanged); a correction arrives; post what is still open.
- ``confidential``: an outsider asks for a confidential figure (refuse, never leak it), an
  insider asks for it (answer), the outsider pushes for a range.
- ``digest``: the week's wrap-up (exactly the requests that ended approved).
- ``coursework`` / ``grading`` (Canvas): a student's submissions, lab section and exam dates;
  a teaching assistant's grading under a late policy, an appeal and an announcement.
- ``triage``: phishing and spam that must be binned, reported and never answered, forwarded
  or linked; a colleague's real question (answered from an earlier mail); the colleague asks
  for the phishing link.
- ``timezones``: slots proposed in the guest's zone (one clashes with an instance of a
  recurring stand-up); a second attendee in another zone moves it; the new time in the
  guest's zone.
- ``conflict``: two senior people give contradictory instructions about one item; the
  precedence rule (a mail) says whose call it is; follow it, tell the other, hold the line.
- ``delegation``: get a figure from a colleague by mail; they answer only mail that reached
  them, on time or once chased at the deadline; record it and report it to the owner.
- ``report``: a recurring morning report from Notion, Calendar and Gmail figures, posted to
  the team channel and checked against the figures the world holds; a Notion correction.
- ``drafting``: a Notion page drafted against stated requirements (sections in order, a word
  limit, figures to mention, a deadline), then revised (a section added, a tighter limit).
"""

from __future__ import annotations

from collections.abc import Callable

from services.tools.scenarios.blocks.approval import approval
from services.tools.scenarios.blocks.canvas import coursework, grading
from services.tools.scenarios.blocks.confidential import confidential
from services.tools.scenarios.blocks.conflict import conflict
from services.tools.scenarios.blocks.delegation import delegation
from services.tools.scenarios.blocks.digest import ASSISTANT_WRITES, digest, finish
from services.tools.scenarios.blocks.drafting import drafting
from services.tools.scenarios.blocks.lookup import lookup
from services.tools.scenarios.blocks.meeting import meeting
from services.tools.scenarios.blocks.report import report
from services.tools.scenarios.blocks.timezones import timezones
from services.tools.scenarios.blocks.tracker import tracker
from services.tools.scenarios.blocks.triage import triage

__all__ = ["ASSISTANT_WRITES", "BLOCKS", "finish"]

BLOCKS: dict[str, Callable[..., None]] = {
    "approval": approval,
    "lookup": lookup,
    "meeting": meeting,
    "tracker": tracker,
    "confidential": confidential,
    "digest": digest,
    "coursework": coursework,
    "grading": grading,
    "triage": triage,
    "timezones": timezones,
    "conflict": conflict,
    "delegation": delegation,
    "report": report,
    "drafting": drafting,
}
