"""What a message commits to: approve, decline or ask back, read as a decision, not keywords.

A text is read clause by clause. In each, decision phrases ("approve", "go ahead", "granted",
"sign off", "decline", "turn down", …) are found and each is flipped by a negation in its
scope: a negator in the few words before it, in the same clause ("we cannot go ahead with
this", "I won't be approving this", "I would not go ahead", "not granted"), or a denial right
after it ("approval isn't possible"). A bare answer opens a sentence: "Yes, …" / "Confirmed:
…" approve and "No, LV-3011 exceeds …" declines, when the sentence decides nothing else. A
question, or a clause that only supposes ("if it were under budget I would approve"),
decides nothing; asking back is its own verdict; so does a mail's subject line ("Re: sign-off
needed for EXP-1234" is context). :func:`verdicts` returns every verdict a
text expresses, so "approved … declined" yields both and a checker can fail the
contradiction.
"""

from __future__ import annotations

import re

VERDICTS = ("approve", "decline", "ask")

_FLIP = {"approve": "decline", "decline": "approve"}
_PHRASES = [
    (
        "approve",
        r"approv(?:e|ed|es|ing|al)|go(?:ing)?[- ]ahead|went ahead|green[- ]?light(?:ed)?"
        r"|granted|grant(?:ing)? (?:it|this|that|the request|your request)"
        r"|sign(?:ed|ing)? off|sign-off|authori[sz](?:e|ed|ing)|accept(?:ed|ing)?"
        r"|ok(?:ay)?'d|okayed|(?:is|are|looks?|seems?) (?:ok(?:ay)?|fine|acceptable|good)"
        r"|good to go|fine to proceed|proceed(?:ing)?|cleared"
        r"|sign(?:ed|ing)? [\w-]+ off|(?:it|this|[a-z]+-\d+) (?:can|may|will) go through"
        r"|(?:is|'s|gets?) a (?:\w+ )?yes|answer is yes",
    ),
    (
        "decline",
        r"declin(?:e|ed|es|ing)|reject(?:ed|s|ing|ion)?|den(?:y|ied|ies|ying)|denial"
        r"|refus(?:e|ed|ing)|turn(?:ed|ing|s)? (?:[\w-]+ ){0,2}?down|veto(?:ed)?"
        r"|(?:is|'s|gets?) a (?:\w+ )?no|answer is no"
        r"|(?:it|this|[a-z]+-\d+) (?:cannot|can't|won't|will not|may not) go through",
    ),
]
# Taking a decision back reads first, before its noun ("withdraw my approval") reads as one.
_RETRACT = (
    r"(?:withdr[ae]w(?:s|n|ing)?|revok(?:e|ed|es|ing)|rescind(?:s|ed|ing)?"
    r"|retract(?:s|ed|ing)?|pull(?:s|ed|ing)?) (?:my |our |the |its |that )?"
    r"(?:approval|sign-off|go-ahead|green light)"
)
_DECISION = [(v, re.compile(rf"\b(?:{p})\b")) for v, p in [("decline", _RETRACT), *_PHRASES]]
_NEGATOR = re.compile(
    r"\b(?:not|no|never|nor|cannot|can't|won't|wouldn't|shouldn't|don't|doesn't|didn't|isn't"
    r"|aren't|wasn't|unable|unlikely|hardly|without|against|no longer|afraid not)\b|n't\b"
)
_AFTER_DENIAL = re.compile(
    r"^\W*(?:\w+\W+){0,4}?(?:is|are|was|will be|would be|can be)?\W*"
    r"(?:not|n't|never|impossible|out of the question|off the table|not possible)\b"
)
_CONDITIONAL = re.compile(r"^(?:if|unless|had|were|once|until|should|in case|whether)\b")
_CONTRAST = re.compile(r"\s*(?:[,;:]|\s-+\s|\s—\s)\s*|\s+(?:but|however|though|although)\s+")
_YES = re.compile(
    r"^(?:yes|yep|yeah|sure|absolutely|certainly|of course|confirmed|approved|agreed)\b"
)
_NO = re.compile(
    r"^(?:no|nope|negative|sorry,? no)\b(?!\s+(?:problem|worries|rush|issue|later|sooner|more|longer|need|doubt|matter))"
)
_ASK = re.compile(
    r"\b(?:could|can|would|will) you (?:please |kindly )?(?:send|share|clarify|confirm|provide"
    r"|forward|explain|tell me|let me know|resend|attach)\b"
    r"|\bplease (?:send|share|clarify|provide|forward|attach|resend)\b"
    r"|\b(?:need|require) (?:more|further|additional|some more) (?:info|information|details"
    r"|context)\b|\bbefore i (?:can )?(?:decide|approve|sign off)\b"
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
# A mail's subject line ("Re: sign-off needed for EXP-1234"): context, never a decision.
_SUBJECT = re.compile(
    r"^\s*(?:subject:\s*)?(?:(?:re|fwd?|aw|sv)(?:\[\d+\])?:\s*)+|^\s*subject:", re.I
)
_GREETING = re.compile(r"^(?:hi|hello|hey|dear|thanks|thank you)\b[^,:]{0,40}[,:]\s*")


def _normal(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u2014", " — ")
    return " ".join(text.lower().split())


def _negated(clause: str, start: int, end: int) -> bool:
    before = clause[:start].split()[-4:]
    if _NEGATOR.search(" ".join(before)):
        return True
    return bool(_AFTER_DENIAL.match(clause[end:]))


def _clause_verdicts(clause: str) -> set[str]:
    out: set[str] = set()
    taken: list[tuple[int, int]] = []
    for verdict, pattern in _DECISION:
        for m in pattern.finditer(clause):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            taken.append(m.span())
            out.add(_FLIP[verdict] if _negated(clause, *m.span()) else verdict)
    return out


def verdicts(text: str) -> set[str]:
    """The verdicts ``text`` expresses (a subset of :data:`VERDICTS`)."""
    low = _normal(text)
    out: set[str] = set()
    if _ASK.search(low):
        out.add("ask")
    # lines first: a mail's subject line ("Re: ...") is not the start of its first sentence,
    # and decides nothing itself ("Re: sign-off needed for EXP-1234" is what it is about)
    lines = [line for line in text.splitlines() if not _SUBJECT.match(line)]
    for sentence in (x for line in lines for x in _SENTENCE.findall(_normal(line))):
        sentence = sentence.strip()
        if not sentence or sentence.endswith("?"):
            continue  # a question decides nothing
        found: set[str] = set()
        supposing = False
        for clause in _CONTRAST.split(sentence):
            clause = clause.strip(" .!")
            if not clause:
                continue
            if _CONDITIONAL.match(clause):
                supposing = True  # its consequent ("I would approve") is supposed too
                continue
            if supposing and re.search(r"\b(?:would|could|'d)\b", clause):
                continue
            supposing = False
            if _ASK.search(clause):
                continue
            found |= _clause_verdicts(clause)
        if not found:
            sentence = _GREETING.sub("", sentence)  # "Hi Ana, no on LV-3011: ..."
            if _NO.match(sentence):
                found.add("decline")
            elif _YES.match(sentence):
                found.add("approve")
        out |= found
    return out
