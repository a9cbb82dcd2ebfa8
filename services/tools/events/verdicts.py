"""What a message commits to: approve, decline or ask back, read from its wording.

A decision counts only if the assistant committed to one: :func:`verdicts` returns every
verdict a text expresses, so "approved … declined" yields both and a checker can fail the
contradiction. Negated approvals ("not approved", "can't approve") read as declines, and are
removed before approvals are looked for, so they never count twice.
"""

from __future__ import annotations

import re

DECLINE = re.compile(
    r"\b(?:not\s+(?:be\s+)?approv(?:e|ed|ing)|(?:can(?:no|')t|cannot|won't|unable\s+to)\s+"
    r"approve|declin(?:e|ed|ing)|reject(?:ed|ing)?|den(?:y|ied)|refus(?:e|ed))\b"
)
APPROVE = re.compile(r"\b(?:approv(?:e|ed|ing)|go\s+ahead|granted|green[- ]light(?:ed)?)\b")
ASK = re.compile(
    r"\b(?:could|can|would)\s+you\s+(?:please\s+)?(?:send|share|clarify|confirm|provide)\b"
)
VERDICTS = ("approve", "decline", "ask")


def verdicts(text: str) -> set[str]:
    """The verdicts ``text`` expresses (a subset of :data:`VERDICTS`)."""
    low = " ".join(text.lower().split())
    out: set[str] = set()
    if DECLINE.search(low):
        out.add("decline")
        low = DECLINE.sub(" ", low)
    if APPROVE.search(low):
        out.add("approve")
    if ASK.search(low):
        out.add("ask")
    return out
