"""A second held-out set of rephrasings of the verdict sentences.

Written blind, by someone who read neither the verdict reader, its test phrases, nor the
other held-out sets, on 2026-12-04 (only the oracle's sentence patterns in heldout.py, from
``_REF = `` onward, were read). It is a measurement set and must never be used to tune the
reader: change the reader to pass these and the set stops measuring anything.

Each list says the same verdict as the oracle sentence it replaces, in the way an office
worker might write it: formal and casual, British and American, hedged, the verdict word
late, a harmless distractor clause, a negated form of the opposite verdict, idioms. Phrases
for the kinds that carry a reference keep ``{ref}``; the reversal kinds carry none and start
in lower case (they follow a greeting such as "Hi Ana, "). Each keeps the original's ending:
":" where a reason clause follows, "." for the final verdicts.
"""

from __future__ import annotations

import random
import re

from tests.tools.heldout import RULES as ORACLE_RULES
from tests.tools.heldout import paraphrase

# "{ref} is approved:"
APPROVE = [
    "{ref} has been approved:",
    "Happy to approve {ref}:",
    "You have the green light for {ref}:",
    "Good news, {ref} is a go:",
    "I'm pleased to confirm that {ref} has been signed off:",
    "Nothing stops {ref} from going ahead:",
    "Following review, I can confirm that {ref} is authorised:",
    "Go ahead with {ref}, you have my approval:",
    "{ref} gets a thumbs up from me:",
    "I see no reason to hold {ref} back, so consider it approved:",
    "Having looked over the paperwork (thanks for the quick turnaround), I'm approving {ref}:",
    "Consider {ref} OK'd:",
    "I've no objection to {ref}, please proceed:",
    "I think we can let {ref} through, so yes, it's approved:",
    "After checking with finance, I'm glad to say yes to {ref}:",
    "I have authorized {ref}:",
]

# "{ref} is declined:"
DECLINE = [
    "{ref} has been declined:",
    "I'm afraid I can't approve {ref}:",
    "I can't sign off on {ref}:",
    "Unfortunately {ref} has been turned down:",
    "{ref} gets a thumbs down from me:",
    "Sorry, but it's a no on {ref}:",
    "I'm not able to authorise {ref}:",
    "Having reviewed it carefully (and thanks for sending the receipts), I have to reject {ref}:",
    "We won't be going ahead with {ref}:",
    "I regret to inform you that {ref} was not approved:",
    "I'm going to have to say no to {ref}:",
    "{ref} doesn't get the green light this time:",
    "Please don't proceed with {ref}, it has been refused:",
    "I'm unable to give {ref} my approval:",
    "After checking with finance, {ref} is rejected:",
    "I won't be approving {ref}:",
]

# "it is approved after all:" (reverses an earlier decline; follows "Hi Ana, ")
LATE_APPROVE = [
    "scratch my earlier no, it's approved now:",
    "on second thought, we can approve it after all:",
    "having looked again, my earlier refusal no longer stands and it's approved:",
    "good news, I've reversed my decision and it's a yes:",
    "after a second look, it does get the green light:",
    "please disregard my previous no, you're good to go:",
    "turns out we can go ahead with it after all:",
    "following further review, I'm now happy to authorise it:",
    "an update on my earlier reply, I've changed my mind and it's approved:",
    "apologies for the earlier rejection, it's approved now:",
    "contrary to what I said before, it can go ahead:",
    "finance found the budget after all, so it's approved:",
    "my earlier decline is withdrawn and I'm signing it off:",
    "so, reversing my earlier answer, it's a thumbs up:",
    "you can ignore my last message, it's been approved after all:",
    "nothing stops it from going ahead now, I was wrong to refuse it earlier:",
]

# "I have to correct my earlier answer. It is declined after all:" (reverses an approval)
LATE_DECLINE = [
    "sorry, I need to correct my earlier answer, it's declined after all:",
    "on second thought, I have to withdraw my approval:",
    "apologies for the mix-up, but it's a no after all:",
    "unfortunately I spoke too soon and can't approve it after all:",
    "please disregard my earlier yes, it has been turned down:",
    "having looked again, my earlier approval no longer stands:",
    "an update on my previous reply, I've changed my mind and it's declined:",
    "scratch my earlier yes, I can't sign off on it:",
    "regrettably, I have to reverse my decision and reject it:",
    "finance has flagged a problem, so I'm retracting my approval:",
    "contrary to what I said before, it can't go ahead:",
    "my earlier sign-off was a mistake and it's now declined:",
    "sorry to backtrack, but it's a thumbs down after all:",
    "ignore my last message, please don't proceed with it:",
    "following a second review, the earlier approval is revoked:",
    "my apologies, the green light I gave earlier is withdrawn:",
]

# "{ref}: approved (final)."
FINAL_APPROVE = [
    "{ref} is approved, and that's final.",
    "Final decision on {ref}: it's approved.",
    "My final decision is to approve {ref}.",
    "{ref} has my definitive approval.",
    "{ref} is signed off, no further review needed.",
    "To close this out, {ref} is approved for good.",
    "{ref} gets the final green light.",
    "Nothing further stands in the way of {ref}, it is conclusively approved.",
    "For the record, {ref} is approved and the matter is closed.",
    "{ref}, approved, final.",
    "I'm formally and finally authorising {ref}.",
    "After all the back and forth, {ref} is approved once and for all.",
    "{ref} is approved, and I won't be revisiting it.",
    "Consider {ref} approved, this decision stands.",
    "Last word from me, {ref} has been approved.",
    "There will be no change of heart on {ref}, it is approved.",
]

# "{ref}: declined (final)."
FINAL_DECLINE = [
    "{ref} is declined, and that's final.",
    "Final decision on {ref}: it's declined.",
    "My final decision is to decline {ref}.",
    "{ref} is rejected, with no further appeal.",
    "I won't be approving {ref}, and that decision is final.",
    "{ref} gets a definitive thumbs down.",
    "For the record, {ref} is declined and the matter is closed.",
    "{ref}, declined, final.",
    "After all the back and forth, {ref} is turned down once and for all.",
    "I cannot sign off on {ref}, and I won't be revisiting it.",
    "Consider {ref} refused, this decision stands.",
    "Last word from me, {ref} has been declined.",
    "{ref} will not go ahead, and that is my final answer.",
    "I'm formally and finally rejecting {ref}.",
    "{ref} does not get the green light, and this is final.",
    "The answer on {ref} is a firm and final no.",
]

KINDS = {
    "approve": APPROVE,
    "decline": DECLINE,
    "late_approve": LATE_APPROVE,
    "late_decline": LATE_DECLINE,
    "final_approve": FINAL_APPROVE,
    "final_decline": FINAL_DECLINE,
}

# heldout.py's RULES are in the order approve, decline, late approve, late decline,
# final approve, final decline (checked against its patterns).
RULES: list[tuple[re.Pattern[str], list[str]]] = [
    (pattern, forms) for (pattern, _), forms in zip(ORACLE_RULES, KINDS.values(), strict=True)
]


def paraphrase_blind2(text: str, rng: random.Random) -> str:
    """The same statement with each verdict sentence said another way (from this set)."""
    return paraphrase(text, rng, RULES)
