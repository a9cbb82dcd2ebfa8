"""What a message commits to: approve, decline or ask back, read as a decision, not keywords.

A text is read clause by clause. In each, decision phrases ("approve", "go ahead", "granted",
"sign off", "decline", "turn down", …) are found and each is flipped by a negation in its
scope: a negator in the few words before it, in the same clause ("we cannot go ahead with
this", "I won't be approving this", "I would not go ahead", "not granted"), or a denial right
after it ("approval isn't possible"). A bare answer opens a sentence: "Yes, …" / "Confirmed:
…" approve and "No, LV-3011 exceeds …" declines, when the sentence decides nothing else. A
question, a clause that only supposes ("if it were under budget I would approve") and a
decision asked for or awaited ("still needs approval", "please approve") decide nothing, and a
mail's subject line is context ("Re: sign-off needed for EXP-1234"); asking back is its own
verdict. :func:`verdicts` returns every verdict a text expresses, so "approved … declined"
yields both and a checker can fail the contradiction.
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
        r"|(?:is|'s|gets?) a (?:\w+ (?:and \w+ )?)?yes|answer is yes|(?:is|'s) a go\b(?!-)"
        # idioms: "LGTM", "go for it", "no objection from me", "fine by me"
        r"|lgtm|go for it|ship it|no objections?(?! (?:to (?:declin|reject|refus|turn)))"
        r"|(?:ok(?:ay)?|fine|good) (?:by|with) me",
    ),
    (
        "decline",
        r"declin(?:e|ed|es|ing)|reject(?:ed|s|ing|ion)?|den(?:y|ied|ies|ying)|denial"
        r"|refus(?:e|ed|ing|al)|turn(?:ed|ing|s)? (?:[\w-]+ ){0,2}?down|veto(?:ed)?"
        r"|withh[oe]ld(?:s|ing)?|no[- ]go"
        # "I have to pass on this one", "I'll pass", "a hard pass" (not "pass it on to Sam")
        r"|pass(?:ing)? on (?:this|that|it|the request|[a-z]+-\d+)(?! (?:to|along|for)\b)"
        r"|(?:'ll|will|have to|must|going to|'d rather|hard|firm|polite) pass"
        r"(?=$| for now| this time| on (?:this|that|it|the request|[a-z]+-\d+))"
        r"|(?:is|'s|gets?) a (?:\w+ (?:and \w+ )?)?no|answer is no"
        r"|(?:it|this|[a-z]+-\d+) (?:cannot|can't|won't|will not|may not) go through",
    ),
]
# Verdict forms beyond the phrase list: "say no to", "give it the OK", "got the nod", "the
# verdict is yes" (read like any phrase, so "never got the OK" and "can't say yes" flip).
# giving it in any form, getting it not as an aim ("we need to get the OK" is none)
_HAVE = (
    r"(?:give|gives|gave|given|giving|(?<!to )(?:get|receive)|gets|got|gotten|has|have|had"
    r"|received|with)"
)
_VERDICT_IS = (  # "the verdict is yes", "my decision on LV-3011 remains a firm no"
    r"(?:answer|verdict|decision|call|response|ruling|reply)(?: (?:on|for|about) [\w-]+)?"
    r" (?:is|was|will be|'s|remains|stays)(?: still| firmly| an?)?"
    r"(?: firm| clear| definite| definitive| simple)? "
)
_FORMS = [
    (
        "approve",
        r"sa(?:y|ys|id|ying) yes"
        rf"|{_HAVE} (?:it |this |that |them |[a-z]+-\d+ )?(?:the|an?|my|our|your|their|a big)"
        r" (?:ok(?:ay)?|nod|thumbs[- ]up|blessing|all[- ]clear|yes|approval|sign-?off|go-ahead"
        r"|green light)"
        rf"|{_VERDICT_IS}yes",
    ),
    (
        "decline",
        r"sa(?:y|ys|id|ying) no(?! (?:more|longer|problem))|thumbs[- ]down"
        rf"|{_VERDICT_IS}no(?! (?:longer|more))",
    ),
]
_DECISION = [(v, re.compile(rf"\b(?:{p})\b")) for v, p in [*_FORMS, *_PHRASES]]
# A verdict taken back or named as superseded is read before the clause's own phrases and
# masked out of it: taking one back decides the other way ("withdraw my approval", "reverse my
# prior sign-off", "my earlier sign-off no longer stands" decline; "the previous decline is
# overturned" approves), one only mentioned as earlier decides nothing ("despite my earlier
# approval"), unless it is said to stand ("my earlier decline still stands").
_NOUNS = {
    "approve": r"approval|sign-?off|go-ahead|green light|blessing|ok(?:ay)?|yes",
    "decline": r"decline|rejection|refusal|denial|veto|turn-?down|no",
}
_WEAK = re.compile(r"ok(?:ay)?|yes|no|decline")  # nouns only after "my", "the earlier", …
_DET = r"(?:my|our|the|that|this|your|his|her|their|its|an?)"
_EARLIER = (
    r"(?:earlier|previous|prior|last|original|initial|former|old|preliminary"
    r"|provisional|tentative)"
)
_NOUN = (
    rf"(?:(?P<det>{_DET}) )?(?:(?P<was>{_EARLIER}) )?(?P<noun>{_NOUNS['approve']}"
    rf"|{_NOUNS['decline']}|answer|decision|reply|response|verdict|call|ruling|e-?mail|message)"
)
# a few words between the noun and what is said of it ("my approval for LV-3011 is withdrawn"),
# not a negation ("is not withdrawn") nor the start of another statement ("… and it is …")
_GAP = (
    r"(?: (?!(?:not|no|never|and|so|but|because|since|which|means)\b)(?![\w'-]*n't\b)"
    r"[\w'-]+){0,3}?"
)
_SUPERSEDED = [
    (  # taken back: "withdraw my approval", "take back my earlier no"
        "flip",
        r"(?:withdr[ae]w(?:s|n|ing)?|revok(?:e|ed|es|ing)|rescind(?:s|ed|ing)?"
        r"|retract(?:s|ed|ing)?|pull(?:s|ed|ing)?|revers(?:e|ed|es|ing)|overturn(?:s|ed|ing)?"
        r"|overrul(?:e|ed|es|ing)|cancel(?:s|led|ed|ling|ing)?|undo(?:es|ing|ne)?|undid"
        r"|(?:tak(?:e|es|ing|en)|took|walk(?:s|ed|ing)?) back) " + _NOUN,
    ),
    (  # said to be gone: "approval withdrawn", "the earlier decline no longer stands"
        "flip",
        _NOUN + _GAP + r"(?: is| are| was| has been| have been|'s)?(?: now| hereby)?"
        r" (?:withdrawn|revoked|rescinded|retracted|reversed|overturned|overruled|cancell?ed"
        r"|void(?:ed)?|null and void|no longer (?:stands|holds|applies|valid|in effect|in place)"
        r"|(?:does not|doesn't|won't|will not|can't|cannot) (?:stand|hold|apply))",
    ),
    (  # said to stand: "my earlier decline still stands"
        "keep",
        _NOUN + _GAP + r"(?: still)? (?:stands|holds|remains in (?:place|effect)|applies)",
    ),
    ("mention", _NOUN),  # only named: "despite my earlier approval"
    (  # a verdict given before a change: "I had approved it", "it was initially declined"
        "mention",
        r"(?P<was>had|(?:had |was |were |been )?(?:previously|initially|originally|at first))"
        r" (?:approved|declined|rejected|refused|denied|signed (?:it )?off|okayed"
        r"|turned (?:it )?down)(?P<det>)(?P<noun>)",
    ),
]
_SUPERSEDED_RE = [(how, re.compile(rf"\b(?:{p})\b")) for how, p in _SUPERSEDED]
# A decision asked for or still awaited is none yet, and is masked out of the clause like a
# superseded one: "still needs approval", "pending your sign-off", "approval for LV-1 is still
# outstanding", "needs to be approved", "not yet approved", "please approve". The speaker's own
# "I need to decline" is a decision: what is awaited is a noun, a passive or a request.
_AWAITED = (
    r"(?:approval|sign-?off|go[- ]ahead|green light|blessing|ok(?:ay)?|authori[sz]ation"
    r"|decision|verdict)"
)
_VERB_DONE = (
    r"(?:approved|signed off|authori[sz]ed|accepted|cleared|declined|rejected|refused|denied)"
)
_PENDING = re.compile(
    r"\b(?:"
    r"(?:needs?|needed|needing|requires?|required|requiring|pending|awaits?|awaiting"
    r"|wait(?:s|ing|ed)? (?:on|for)|seek(?:s|ing)?|sought|subject to|ask(?:s|ed|ing)? for"
    r"|request(?:s|ed|ing)?(?: for)?)"
    rf"(?: (?:{_DET}|[\w-]+'s))?(?: (?:final|formal|official|written|further|explicit))? {_AWAITED}"
    rf"|{_AWAITED}(?: (?:for|of|on|from|by) [\w'-]+)?(?: is| are)?(?: still)?"
    r" (?:needed|required|pending|outstanding)"
    r"|(?:needs?|needed|requires?|required|has|have|is|are|remains?) (?:yet |still )?to be "
    + _VERB_DONE
    + r"|not yet (?:been )?"
    + _VERB_DONE
    + r"|(?:please|kindly) (?:approve|sign (?:it |this )?off|decline|reject|authori[sz]e|accept)"
    # none needed: "it needs no approval", "no sign-off is required" (not a decline)
    + rf"|(?:needs?|needed|requires?|required) no (?:further |additional |extra )?{_AWAITED}"
    + rf"|no (?:further |additional |extra )?{_AWAITED}(?: is| was)?"
    r" (?:needed|required|necessary)"
    # held until something happens: "we cannot proceed until legal signs off" (pending, not
    # a decline; the rest of the clause is what is awaited)
    r"|(?:cannot|can't|won't|will not|unable to|can not|couldn't|shouldn't|should not|mustn't"
    r"|must not)(?: [\w'-]+){0,3}? (?:proceed|go ahead|move forward|continue|approve|process"
    r"|sign (?:it |this |[a-z]+-\d+ )?off)\b.*?\b(?:until|till|pending)\b.*"
    # what has to happen first: "... confirm before we can proceed"
    r"|before (?:we|i|you|they|it|this|[a-z]+-\d+) (?:can |could |may )?"
    r"(?:proceed|go ahead|move forward|approve|sign (?:it |this )?off)"
    r")\b"
)
_NEGATOR = re.compile(
    r"\b(?:not|no|never|nor|cannot|can't|won't|wouldn't|shouldn't|don't|doesn't|didn't|isn't"
    r"|aren't|wasn't|unable|unlikely|hardly|without|against|no longer|afraid not"
    r"|withh[oe]ld(?:s|ing)?)\b|n't\b"
)
_AFTER_DENIAL = re.compile(
    r"^\W*(?:\w+\W+){0,4}?(?:is|are|was|will be|would be|can be|has been|have been)?\W*"
    r"(?:not|n't|never|impossible|out of the question|off the table|not possible"
    r"|withheld|denied|refused|rejected|declined)\b"
)
_REASON = re.compile(r"reasons?|grounds|why")
_CONDITIONAL = re.compile(r"^(?:if|unless|had|were|once|until|should|in case|whether)\b")
_CONTRAST = re.compile(r"\s*(?:[,;:]|\s-+\s|\s—\s)\s*|\s+(?:but|however|though|although)\s+")
_YES = re.compile(
    r"^(?:yes|yep|yeah|sure|absolutely|certainly|of course|confirmed|approved|agreed)\b"
)
# "No" answers only when it is not the start of a phrase about something else ("no rush",
# "no further changes", "no questions from me")
_NO = re.compile(
    r"^(?:no|nope|negative|sorry,? no)\b(?!\s+(?:problem|worries|worry|rush|hurry|issue|later"
    r"|sooner|more|longer|need|doubt|matter|further|other|additional|extra|new|big deal|one"
    r"|idea|news|pressure|changes?|questions?|actions?|comments?|concerns?|objections?"
    r"|updates?|follow-?ups?|edits?|notes?|reason)\b)"
)
_ASK = re.compile(
    r"\b(?:could|can|would|will) you (?:please |kindly )?(?:send|share|clarify|confirm|provide"
    r"|forward|explain|tell me|let me know|resend|attach)\b"
    r"|\bplease (?:send|share|clarify|provide|forward|attach|resend)\b"
    r"|\b(?:need|require) (?:more|further|additional|some more) (?:info|information|details"
    r"|context)\b|\bbefore i (?:can )?(?:decide|approve|sign off)\b"
)
# Modality that says the verdict is not given: a wish ("I wish I could approve this"), or a
# liking followed by a refusal ("I'd love to say yes, but I can't").
_WISH = re.compile(
    r"\b(?:wish(?:es|ed)? (?:i|we|they) (?:could|were able to|was able to|had)|if only (?:i|we)"
    r" could|(?:would|'d) have (?:liked|loved|been happy) to)\b"
)
_WOULD_LIKE = re.compile(r"\b(?:would|'d) (?:really )?(?:love|like|be (?:happy|glad)) to\b")
_BUT = re.compile(r"\b(?:but|however|unfortunately|sadly)\b")
# A clause that is a verdict as a bare noun phrase: the status line's "Decision: a firm no",
# "Status: a no on LV-3011", "a yes from me".
_BARE = re.compile(
    r"^(?:(?:it's|that's|it is|that is) )?an? (?:\w+ (?:and \w+ )?)?(?P<word>no|yes)\b(?!-)"
    r"(?: (?:on|for|from)\b.*)?$"
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
# A mail's subject line ("Re: sign-off needed for EXP-1234"): context, never a decision.
_SUBJECT = re.compile(
    r"^\s*(?:subject:\s*)?(?:(?:re|fwd?|aw|sv)(?:\[\d+\])?:\s*)+|^\s*subject:", re.I
)
_GREETING = re.compile(r"^(?:hi|hello|hey|dear|thanks|thank you)\b[^,:]{0,40}[,:]\s*")


# Negators of more than a few words, said as one ("I'm not in a position to give it my
# sign-off" is "I'm unable to give it …"), so the negation's few-word scope reaches the verdict.
_LONG_NEGATORS = re.compile(
    r"\b(?:not in (?:a|any) position to|in no position to|not able to|not at liberty to)\b"
)


def _normal(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u2014", " — ")
    return _LONG_NEGATORS.sub("unable to", " ".join(text.lower().split()))


def _negated_before(clause: str, start: int) -> bool:
    """A negator in the few words before ``start``; one that gives a reason ("no reason not
    to", "can't see why we wouldn't") counts its negations: an even number cancels out."""
    before = clause[:start].split()
    why = [i for i, w in enumerate(before) if _REASON.fullmatch(w) and len(before) - i <= 5]
    if why:
        words = before[max(0, why[-1] - 4) :]
        return sum(bool(_NEGATOR.search(w)) for w in words) % 2 == 1
    return bool(_NEGATOR.search(" ".join(before[-4:])))


def _negated(clause: str, start: int, end: int) -> bool:
    if _negated_before(clause, start):
        return True
    return bool(_AFTER_DENIAL.match(clause[end:]))


def _noun_verdict(noun: str) -> str | None:
    for verdict, nouns in _NOUNS.items():
        if re.fullmatch(nouns, noun):
            return verdict
    return None  # "answer", "decision", a verdict verb: none of its own


def _superseded(clause: str) -> tuple[str, set[str]]:
    """``clause`` with its superseded verdicts masked out, and what taking them back decides."""
    out: set[str] = set()
    for how, pattern in _SUPERSEDED_RE:

        def read(m: re.Match[str], how: str = how) -> str:
            if _WEAK.fullmatch(m["noun"]) and not (m["det"] or m["was"]):
                return m[0]  # a bare "no", "ok": read as they are
            if how != "flip" and not m["was"]:
                return m[0]  # "you have my approval", "it's a no": current verdicts
            verdict = _noun_verdict(m["noun"])
            if verdict and how == "flip":  # "I'm not withdrawing my approval" keeps it
                out.add(verdict if _negated_before(m.string, m.start()) else _FLIP[verdict])
            elif verdict and how == "keep":
                out.add(verdict)
            return "_"

        clause = pattern.sub(read, clause)
    return clause, out


def _clause_verdicts(clause: str) -> set[str]:
    clause, out = _superseded(clause)
    clause = _PENDING.sub("_", clause)
    taken: list[tuple[int, int]] = []
    for verdict, pattern in _DECISION:
        for m in pattern.finditer(clause):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            taken.append(m.span())
            out.add(_FLIP[verdict] if _negated(clause, *m.span()) else verdict)
    return out


def _not_given(clause: str, sentence: str) -> bool:
    """``clause`` wishes for its verdict, or would like to give it and the sentence then
    refuses ("…, but I can't")."""
    if _WISH.search(clause):
        return True
    if not _WOULD_LIKE.search(clause):
        return False
    rest = sentence[sentence.find(clause) + len(clause) :]
    turn = _BUT.search(rest)
    return turn is not None and bool(_NEGATOR.search(rest[turn.start() :]))


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
                supposing = True  # its consequent ("I would approve", "we can proceed") too
                continue
            if supposing and re.search(r"\b(?:would|could|can|will|may|'d|'ll)\b", clause):
                continue
            supposing = False
            if _ASK.search(clause):
                continue
            said = _clause_verdicts(clause)
            bare = _BARE.match(clause)
            if not said and bare:
                said = {"approve" if bare["word"] == "yes" else "decline"}
            if said and _not_given(clause, sentence):
                said = {_FLIP.get(v, v) for v in said}
            found |= said
        if not found:
            sentence = _GREETING.sub("", sentence)  # "Hi Ana, no on LV-3011: ..."
            if _NO.match(sentence) and not _PENDING.match(sentence):  # "no approval needed"
                found.add("decline")
            elif _YES.match(sentence):
                found.add("approve")
        out |= found
    return out
