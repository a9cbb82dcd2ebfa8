"""The verdict reader against a paraphrase suite: several hundred phrasings of both verdicts
(negation, modal and refusal forms, "yes/no + reason"), each with distractor clauses around
it, generated combinatorially; plus asks, questions, suppositions and contradictions, and
groups for the classes of language the external held-out set (issue 27) found misread:
superseded verdicts, double negatives, "say no to" / "got the OK" forms, "the verdict is
yes/no" and a "No …" aside that is not about the item."""

from __future__ import annotations

import itertools

import pytest

from services.tools.events.verdicts import verdicts

APPROVE = [
    "Approved.", "{x} is approved.", "I approve {x}.", "Happy to approve {x}.",
    "Yes, {x} is fine.", "Yes — go ahead with {x}.", "Go ahead.", "You can go ahead with {x}.",
    "Granted.", "{x} has been granted.", "Green light for {x}.", "I'm signing off on {x}.",
    "Consider {x} signed off.", "Confirmed: {x} is OK.", "{x} looks good to me.",
    "That's fine, please proceed.", "I'd approve {x}.", "I would go ahead with {x}.",
    "Sure, {x} is okay.", "I'm not going to decline {x}.", "I won't reject {x}.",
    "No objection here: {x} is approved.", "No problem, {x} is approved.",
    "Absolutely, {x} is good to go.", "{x} is accepted.", "I have authorised {x}.",
    "Of course, you have my approval for {x}.", "{x} is cleared.",
    "We can go ahead with {x}.", "Yes. {x} fits the policy.",
]  # fmt: skip
DECLINE = [
    "Declined.", "{x} is declined.", "I have to decline {x}.", "I'm rejecting {x}.",
    "We cannot go ahead with {x}.", "I won't be approving {x}.", "Not granted.",
    "I would not go ahead with {x}.", "No, {x} exceeds the maximum.", "No. {x} is over budget.",
    "{x} is not approved.", "I can't approve {x}.", "Unfortunately {x} has been denied.",
    "I'm afraid I must refuse {x}.", "Sorry, {x} can't be approved.",
    "Approval for {x} isn't possible.", "{x} is not something I can sign off on.",
    "We're turning {x} down.", "I don't approve {x}.", "I'm unable to approve {x}.",
    "{x} won't be going ahead.", "I cannot grant the request.", "{x}: rejected.",
    "We'll have to say no: {x} is declined.", "I'd decline {x}.", "I wouldn't approve {x}.",
    "There's no way I can approve {x}.", "I have decided against approving {x}.",
    "Nope, {x} is denied.", "{x} doesn't get my approval.",
]  # fmt: skip
SUBJECTS = ["LV-3011", "the request", "this"]
FRAMES = [
    "{v}",
    "Thanks for sending this over. {v}",
    "{v} Let me know if anything changes.",
    "Hi Sam, I checked it against the 18 days policy. {v} Best, Ava",
    "Sorry for the slow reply. {v} The figures are in the tracker.",
    "No rush on the paperwork. {v}",
]


def _cases(templates: list[str], verdict: str) -> list[tuple[str, str]]:
    out = []
    for t, x, frame in itertools.product(templates, SUBJECTS, FRAMES):
        v = t.format(x=x)
        v = v[0].upper() + v[1:]
        out.append((frame.format(v=v), verdict))
    return out


SUITE = _cases(APPROVE, "approve") + _cases(DECLINE, "decline")


def test_the_suite_is_several_hundred_phrasings() -> None:
    assert len(SUITE) >= 500 and len({t for t, _ in SUITE}) >= 500


def test_every_paraphrase_reads_as_its_verdict() -> None:
    wrong = [(t, v, sorted(verdicts(t))) for t, v in SUITE if verdicts(t) != {v}]
    assert not wrong, f"{len(wrong)} of {len(SUITE)} misread, e.g. {wrong[:8]}"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Could you send the receipt first?", {"ask"}),
        ("Can you clarify the dates before I decide?", {"ask"}),
        ("Please share the signed contract.", {"ask"}),
        ("Is LV-3011 approved?", set()),  # a question decides nothing
        ("Should I approve this?", set()),
        ("If it were under budget I would approve it.", set()),  # supposing only
        ("If it were under budget I would approve, but it is not, so I decline.", {"decline"}),
        ("Approved. Also declined.", {"approve", "decline"}),  # a contradiction shows
        ("Approved, thanks. Could you confirm the dates?", {"approve", "ask"}),
        ("Thanks, noted.", set()),
        ("No worries, I will look at it tomorrow.", set()),
        ("No later than Friday, please.", set()),
        ("I will go through the document tomorrow.", set()),
        ("The cap is 18 days; anything up to that can go through.", set()),  # a rule, no verdict
        # forms the held-out paraphrased oracle (tests/tools/heldout.py) first found misread
        ("Hi Uma, No on TRV-2123, I'm afraid: it is over the cap.", {"decline"}),
        ("TRV-2123 is a no, sorry.", {"decline"}),
        (
            "Re: Change CTR-4487\nHi Quinn, No on CTR-4487: $560,312.00 is over the cap.",
            {"decline"},
        ),
        ("TRV-2123: final answer is no.", {"decline"}),
        ("I have to withdraw my approval: it overlaps the freeze.", {"decline"}),
        ("TRV-2123 gets a yes from me.", {"approve"}),
        ("Good news, TRV-2123 can go through.", {"approve"}),
        ("I can sign TRV-2123 off: it is within the allowance.", {"approve"}),
        ("TRV-2123 can't go through.", {"decline"}),
    ],
)
def test_asks_questions_suppositions_and_contradictions(text: str, want: set[str]) -> None:
    assert verdicts(text) == want


A, D, NONE = {"approve"}, {"decline"}, set()
# a verdict taken back, or only named as an earlier one, is not the current verdict
SUPERSEDED = [
    ("I'm withdrawing my earlier approval of TRV-2123: the dates clash with the freeze.", D),
    ("Consider my prior sign-off on TRV-2123 void.", D),
    ("I'm taking back my go-ahead on TRV-2123.", D),
    ("TRV-2123: approval withdrawn.", D),
    ("The approval for TRV-2123 has been revoked.", D),
    ("Despite my previous approval, TRV-2123 is now declined.", D),
    ("TRV-2123 was originally approved; it is declined now.", D),
    ("The earlier rejection of TRV-2123 has been overturned, so you can go ahead.", A),
    ("We're reversing the original decline: TRV-2123 is approved.", A),
    ("Setting aside my earlier no, TRV-2123 is approved.", A),
    ("I had declined TRV-2123, but it is approved now.", A),
    ("My initial refusal stands: TRV-2123 is over the cap.", D),
    ("My previous approval of TRV-2123 still holds.", A),
    ("I'm not withdrawing my approval of TRV-2123.", A),
    ("There's no approval for TRV-2123 yet.", D),
    ("My earlier reply had a typo in the dates.", NONE),
    ("The original approval form is attached.", NONE),
    ("Did my earlier approval reach you?", NONE),
]
# negations that give a reason count in pairs: "no reason not to" approves
DOUBLE_NEGATIVE = [
    ("There's no reason we shouldn't go ahead with TRV-2123.", A),
    ("I can't think of any reason to turn TRV-2123 down.", A),
    ("I can't see why we wouldn't sign off on TRV-2123.", A),
    ("Honestly, I don't see why TRV-2123 shouldn't go ahead.", A),
    ("There are no grounds to decline TRV-2123.", A),
    ("There's every reason to approve TRV-2123.", A),
    ("I see no reason to approve TRV-2123.", D),
    ("I can't see why we would approve TRV-2123.", D),
    ("That's the reason I can't approve TRV-2123.", D),
    ("No reason to rush, I'll look at it tomorrow.", NONE),
]
# saying yes or no to it, giving or getting the OK
SAY_AND_GIVE = [
    ("I'm happy to say yes to TRV-2123.", A),
    ("Finance gave TRV-2123 the thumbs up this morning.", A),
    ("TRV-2123 has the nod from me.", A),
    ("You have my blessing on TRV-2123.", A),
    ("I've given it the all-clear.", A),
    ("We'll have to say no to TRV-2123 this time.", D),
    ("I can't say yes to TRV-2123.", D),
    ("TRV-2123 didn't get the OK from finance.", D),
    ("It's a thumbs down on TRV-2123, sorry.", D),
    ("Say no more, I'll check it tomorrow.", NONE),
    ("Did TRV-2123 get the OK?", NONE),
    ("We still need to get the OK from legal on TRV-2123.", NONE),
]
# the decision named, then a bare yes or no
VERDICT_IS = [
    ("My decision on TRV-2123 is yes.", A),
    ("The call on TRV-2123 is yes, go ahead.", A),
    ("Our verdict is a firm no.", D),
    ("The answer remains no.", D),
    ("The decision was no: it is over the cap.", D),
    ("Is the answer yes or no?", NONE),
    ("Decision pending; no answer yet.", NONE),
]
# a "No …" that is about something else is not a decline; a bare no still is
ASIDES = [
    ("TRV-2123 is approved. No further questions from me.", A),
    ("No reason to rush: TRV-2123 is approved.", A),
    ("Oh no, I forgot the attachment. TRV-2123 is approved.", A),
    ("No changes needed on your side: TRV-2123 is declined.", D),
    ("TRV-2123 is declined, sorry. No further action needed.", D),
    ("No, TRV-2123 is over the cap.", D),
    ("No on TRV-2123: it's over the cap.", D),
    ("No further updates today.", NONE),
]
# found by the second blind set's first run (its own phrasings stay out of here): giving the
# approval noun (negated far from the noun), "a go", stacked adjectives before a bare yes/no
GIVE_AND_GO = [
    ("We can give TRV-2123 our approval today.", A),
    ("I'm not in a position to give TRV-2123 my sign-off.", D),
    ("Legal is unable to give it their blessing.", D),
    ("It's a go for TRV-2123.", A),
    ("TRV-2123 is a go, book it.", A),
    ("TRV-2123 is a no-go, I'm afraid.", D),
    ("That's a clear and definite no on TRV-2123.", D),
    ("My answer is a firm and final yes.", A),
    ("Is TRV-2123 a go?", NONE),
    ("A good plan is a go-to list; none yet for TRV-2123.", NONE),
]
# a decision asked for or still awaited is none yet ("still needs approval" was read as one);
# the speaker's own "I need to decline" is a decision, and so is a verdict beside a pending one
PENDING = [
    ("TRV-2123 still needs approval.", NONE),
    ("I need your approval by Friday for TRV-2123.", NONE),
    ("TRV-2123 is pending approval from finance.", NONE),
    ("TRV-2123 awaits your sign-off.", NONE),
    ("Waiting on the go-ahead for TRV-2123.", NONE),
    ("TRV-2123 requires sign-off from legal.", NONE),
    ("TRV-2123 needs to be approved by legal.", NONE),
    ("TRV-2123 is not yet approved.", NONE),
    ("Approval for TRV-2123 is still outstanding.", NONE),
    ("Please approve TRV-2123.", NONE),
    ("I need to decline TRV-2123: it is over the cap.", D),
    ("TRV-2123 is approved; no further sign-off needed.", A),
    ("TRV-2123 no longer needs approval: it is declined.", D),
    ("The request for approval of TRV-2123 is granted.", A),
    ("Your request is approved.", A),
]
# none needed, or what has to happen first, is no verdict either: "it needs no approval" was
# a decline, "... confirm before we can proceed" and "once you confirm, we can proceed" approvals
CONDITIONS = [
    ("TRV-2123 needs no approval.", NONE),
    ("No sign-off is required for TRV-2123.", NONE),
    ("No approval needed for TRV-2123: it is declined.", D),
    ("We need finance to confirm TRV-2123 before we can proceed.", NONE),
    ("Once finance confirms, we can proceed with TRV-2123.", NONE),
    ("Once finance confirms, I will approve TRV-2123.", NONE),
    ("TRV-2123 is approved, so we can proceed.", A),
    ("Approved; TRV-2123 needs no further sign-off.", A),
    ("No: TRV-2123 runs past the cap.", D),
]
# issue 40's class of misreads, in other words: a verdict as a bare noun in a status line, a
# verdict withheld, a wish or a liking then a refusal (modality), idioms of both verdicts, and
# a hold until something happens (pending, not a decline)
IDIOMS_AND_MODALITY = [
    ("Status: a refusal — TRV-2123 runs past the cap.", D),
    ("Decision on TRV-2123: a firm no.", D),
    ("TRV-2123: sign-off withheld.", D),
    ("I'm withholding my approval of TRV-2123 for now.", D),
    ("I really wish I could sign off on TRV-2123, but I can't.", D),
    ("I'd have loved to approve TRV-2123.", D),
    ("I'd love to say yes to TRV-2123, but it isn't within policy.", D),
    ("I'm going to have to pass on TRV-2123.", D),
    ("No objection from finance on TRV-2123.", A),
    ("TRV-2123: LGTM.", A),
    ("Go for it, TRV-2123 is within the allowance.", A),
    ("Fine by me, book TRV-2123.", A),
    ("A yes from me on TRV-2123.", A),
    ("We can't move forward with TRV-2123 until legal signs off.", NONE),
    ("I can't approve TRV-2123 until the receipts arrive.", NONE),
    ("Please pass TRV-2123 on to finance.", NONE),
    ("We will pass the cost on to the client.", NONE),
    ("I'd be glad to walk you through the form.", NONE),
]
GROUPS = {
    "idioms_and_modality": IDIOMS_AND_MODALITY,
    "conditions": CONDITIONS,
    "pending": PENDING,
    "give_and_go": GIVE_AND_GO,
    "superseded": SUPERSEDED,
    "double_negative": DOUBLE_NEGATIVE,
    "say_and_give": SAY_AND_GIVE,
    "verdict_is": VERDICT_IS,
    "asides": ASIDES,
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_each_group_has_both_verdicts_and_distractors(group: str) -> None:
    wants = [frozenset(w) for _, w in GROUPS[group]]
    assert {frozenset(A), frozenset(D)} <= set(wants) and frozenset() in wants, group


def test_the_groups_are_forty_new_cases() -> None:
    texts = [t for cases in GROUPS.values() for t, _ in cases]
    assert len(texts) >= 40 and len(set(texts)) == len(texts)


@pytest.mark.parametrize(
    ("text", "want"), [c for cases in GROUPS.values() for c in cases], ids=lambda x: str(x)[:40]
)
def test_the_groups_read_as_meant_in_every_frame(text: str, want: set[str]) -> None:
    wrong = [f for f in FRAMES if verdicts(f.format(v=text)) != want]
    assert not wrong, (text, sorted(verdicts(text)), wrong)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # a subject line is context: "sign-off" / "approval" there decides nothing
        ("Re: sign-off needed for EXP-1234\nThanks, I will look at it today.", set()),
        ("RE: Approval for EXP-1234\nNo, EXP-1234 is over the cap.", {"decline"}),
        ("Fwd: sign-off needed for EXP-1234\nFor your records.", set()),
        ("Subject: Re: sign-off needed for EXP-1234\n\nNoted, thanks.", set()),
        # the body still decides
        ("Re: sign-off needed for EXP-1234\nEXP-1234 is signed off.", {"approve"}),
        ("Re: sign-off needed for EXP-1234\nI can't sign off EXP-1234.", {"decline"}),
    ],
)
def test_a_subject_line_is_context_not_a_verdict(text: str, want: set[str]) -> None:
    assert verdicts(text) == want


def test_a_mail_statement_is_judged_on_its_body() -> None:
    """``say.reply`` reads a sent mail's body for its verdict: its subject (the statement's
    first line, whatever its prefix) is context."""
    from datetime import UTC, datetime

    from services.tools.events.ops.say import Statement, decided

    def mail(text: str) -> Statement:
        return Statement("gmail", "t", 1, datetime.now(UTC), {"a@b.test"}, text, [])

    assert decided(mail("Sign-off needed for EXP-1234\nThanks, on it.")) == set()
    assert decided(mail("Sign-off needed for EXP-1234\nEXP-1234 is signed off.")) == {"approve"}
    slack = Statement("slack", "c", 2, datetime.now(UTC), {"a@b.test"}, "Approved.", [], "x")
    assert decided(slack) == {"approve"}
