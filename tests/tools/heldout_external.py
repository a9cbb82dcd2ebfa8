"""A second, external set of rephrasings for the oracle's verdict sentences (issue 27).

This set was written without reading the verdict reader (``services/tools/events/verdicts.py``),
its paraphrase suite (``tests/tools/test_verdicts.py``) or the phrase lists of
``tests.tools.heldout``: only the six sentences the oracle says (the patterns of
``tests.tools.heldout.RULES``) and where they stand in its mail and Slack messages. Each list
holds the ways an office worker might really put that one verdict in mail or Slack: polite
and terse, British and American spelling, hedged, with the verdict word late in the
sentence, with a harmless aside ("thanks for the quick turnaround"), and with negations
("not able to approve", "I don't see any reason not to approve"). Every phrasing means the
same verdict to a human reader, keeps ``{ref}`` where the original names the request, and
ends as the original does (``:`` before the reason clause, ``.`` for a final answer).

Where the sentences stand (so that each reads naturally in place):

- ``YES`` / ``NO`` follow a greeting: "Hi Ana, <phrase> 21 days is over the maximum ...".
- ``LATE_YES`` follows "Update on LV-3011: good news, <phrase> it falls under ...", so it
  starts in lower case and names no request (the pattern has none).
- ``LATE_NO`` follows "Update on LV-3011: <phrase> it overlaps ...", a sentence of its own.
- ``FINAL_YES`` / ``FINAL_NO`` are a whole Slack message.
"""

from __future__ import annotations

import random

from tests.tools.heldout import RULES, paraphrase

YES = [
    "{ref} is good to go:",
    "happy to confirm that {ref} has been signed off:",
    "thanks for the quick turnaround. {ref} is approved from my side:",
    "I've gone ahead and approved {ref}:",
    "good news on {ref}, you have the green light:",
    "I don't see any reason not to approve {ref}:",
    "no rush on the paperwork, but {ref} is authorised:",
    "just to let you know, {ref} got the OK:",
    "{ref} has been accepted:",
    "after looking it over, I'm pleased to say we can approve {ref}:",
    "you're all set on {ref}, it's been approved:",
    "{ref} gets a yes from me:",
    "sorry for the slow reply! {ref} is fine to proceed:",
    "we're happy to approve {ref}:",
    "quick one - {ref} is cleared to go ahead:",
    "I can confirm {ref} is authorized:",
]

NO = [
    "I'm afraid {ref} has been turned down:",
    "unfortunately I'm not able to approve {ref}:",
    "sorry, but {ref} can't be approved:",
    "thanks for the quick turnaround, but I have to reject {ref}:",
    "{ref} won't be going ahead:",
    "I've had a look at {ref} and it's a no, I'm afraid:",
    "regrettably we must decline {ref}:",
    "we can't sign off on {ref}:",
    "{ref} doesn't get the green light this time:",
    "I'm sorry to say {ref} has been refused:",
    "{ref} has been denied:",
    "I won't be able to authorise {ref}:",
    "after reviewing it, I'm going to have to say no to {ref}:",
    "{ref} is not approved:",
    "appreciate you sending it in early, but {ref} is rejected:",
    "I can't authorize {ref}, sorry:",
]

LATE_YES = [
    "it can be approved after all:",
    "I've reconsidered and it's now approved:",
    "we're able to approve it after all:",
    "I was wrong earlier and it's approved now:",
    "it gets the green light after all:",
    "I'm reversing my earlier decision, and it's approved:",
    "scratch my previous reply, it's a yes:",
    "it has now been signed off:",
    "I can approve it after all:",
    "please disregard my earlier no, it's approved:",
    "it's been cleared to go ahead after all:",
    "the earlier decline no longer stands and it is approved:",
    "my earlier answer is overturned and it's now accepted:",
    "on second thought, it's fine to go ahead:",
    "thanks for your patience, it's authorised now:",
]

LATE_NO = [
    "Sorry, I need to take back my earlier reply. It can't be approved after all:",
    "Apologies, I got this wrong earlier. It's declined:",
    "I have to reverse my previous approval. It is rejected:",
    "Change of plan, I'm afraid. It won't be going ahead:",
    "Please ignore my earlier yes. It's a no after all:",
    "Correction to my last email - we're not able to approve it:",
    "Unfortunately I have to withdraw the approval:",
    "I spoke too soon earlier. It has been turned down:",
    "My earlier sign-off no longer stands. It is declined:",
    "Sorry for the back-and-forth, but it's not approved after all:",
    "I'm reversing my earlier decision. We can't sign off on it:",
    "Bad news, I'm afraid. It's been refused after all:",
    "Scratch my previous answer. It is denied:",
    "Having looked again, I can no longer approve it:",
]

FINAL_YES = [
    "Final answer on {ref}: approved.",
    "{ref} is approved, and that's final.",
    "{ref}: signed off. This is the final decision.",
    "Closing the loop on {ref}: it's a yes, final.",
    "{ref} - final call is approve.",
    "For the record, {ref} is approved. No further changes.",
    "{ref}: green light, final.",
    "Final decision: {ref} is authorised.",
    "{ref} stands approved; that's my final word.",
    "To wrap up, {ref} is accepted. Final.",
    "{ref}: final verdict is yes.",
    "Last word on {ref}: good to go.",
    "{ref} is approved for good. Thanks all for the quick turnaround.",
    "Settled: {ref} is approved, no more changes.",
]

FINAL_NO = [
    "Final answer on {ref}: declined.",
    "{ref} is rejected, and that's final.",
    "{ref}: not approved. This is the final decision.",
    "Closing the loop on {ref}: it's a no, final.",
    "{ref} - final call is decline.",
    "For the record, {ref} is turned down. No further changes.",
    "{ref}: no green light, final.",
    "Final decision: {ref} is refused.",
    "{ref} stays declined; that's my final word.",
    "To wrap up, {ref} won't go ahead. Final.",
    "{ref}: final verdict is no.",
    "Last word on {ref}: we can't approve it.",
    "{ref} is denied for good. Thanks all for the quick turnaround.",
    "Settled: {ref} is declined, no more changes.",
]

# The kinds in the order of ``tests.tools.heldout.RULES`` (its patterns, these forms).
KINDS: dict[str, list[str]] = {
    "yes": YES,
    "no": NO,
    "late_yes": LATE_YES,
    "late_no": LATE_NO,
    "final_yes": FINAL_YES,
    "final_no": FINAL_NO,
}
RULES_EXTERNAL = [
    (pattern, forms) for (pattern, _), forms in zip(RULES, KINDS.values(), strict=True)
]


def paraphrase_external(text: str, rng: random.Random) -> str:
    """``text`` with each oracle verdict sentence swapped for one of this set's phrasings."""
    return paraphrase(text, rng, RULES_EXTERNAL)
