"""Shape of the second blind held-out set (the phrases themselves are not judged here)."""

from __future__ import annotations

import random

import pytest

from tests.tools.heldout import RULES as ORACLE_RULES
from tests.tools.heldout_blind2 import (
    APPROVE,
    DECLINE,
    FINAL_APPROVE,
    FINAL_DECLINE,
    LATE_APPROVE,
    LATE_DECLINE,
    RULES,
    paraphrase_blind2,
)

# kind: (forms, has a ref, ending, an oracle sentence of that kind)
KINDS = {
    "approve": (APPROVE, True, ":", "EXP-1234 is approved: the receipt for €1,250.00 is attached."),
    "decline": (DECLINE, True, ":", "LV-3011 is declined: 12 days exceed the 10 left."),
    "late_approve": (
        LATE_APPROVE,
        False,
        ":",
        "Hi Ana, it is approved after all: the budget of $4,800 was found.",
    ),
    "late_decline": (
        LATE_DECLINE,
        False,
        ":",
        "Hi Ana, I have to correct my earlier answer. It is declined after all: "
        "only 3 of 7 days remain.",
    ),
    "final_approve": (
        FINAL_APPROVE,
        True,
        ".",
        "Re your note. EXP-2077: approved (final). Paid 9 May.",
    ),
    "final_decline": (
        FINAL_DECLINE,
        True,
        ".",
        "Re your note. LV-4410: declined (final). Sent 9 May.",
    ),
}


def test_rules_pair_the_oracle_patterns_in_order() -> None:
    assert [p for p, _ in RULES] == [p for p, _ in ORACLE_RULES]
    assert [f for _, f in RULES] == [k[0] for k in KINDS.values()]
    for (pattern, _), (_, _, _, sample) in zip(ORACLE_RULES, KINDS.values(), strict=True):
        assert pattern.search(sample)


@pytest.mark.parametrize("kind", KINDS)
def test_forms_shape(kind: str) -> None:
    forms, has_ref, ending, _ = KINDS[kind]
    assert len(set(forms)) == len(forms) >= 15
    for form in forms:
        assert form.endswith(ending), form
        assert form.count("{ref}") == (1 if has_ref else 0), form
        assert form.count("{") == form.count("}") == form.count("{ref}"), form
        said = form.format(ref="EXP-1")
        assert ("EXP-1" in said) == has_ref
        if not has_ref:
            assert said[0].islower(), form
        # no form may be an oracle sentence again (it would be rewritten once more)
        for pattern, _ in ORACLE_RULES:
            assert not pattern.search(said), form


@pytest.mark.parametrize("index", range(len(KINDS)))
def test_paraphrase_rewrites_and_keeps_the_figures(index: int) -> None:
    forms, _, _, sample = list(KINDS.values())[index]
    oracle = ORACLE_RULES[index][0].search(sample)
    assert oracle
    head, tail = sample[: oracle.start()], sample[oracle.end() :]
    rng = random.Random(7)
    seen = set()
    for _ in range(40):
        out = paraphrase_blind2(sample, rng)
        assert not any(p.search(out) for p, _ in ORACLE_RULES)
        assert out.startswith(head) and out.endswith(tail)
        said = out[len(head) : len(out) - len(tail)]
        assert said in {f.format(ref=oracle.groupdict().get("ref", "")) for f in forms}
        for figure in ("1,250.00", "EXP-1234", "LV-3011", "4,800", "3 of 7", "EXP-2077", "LV-4410"):
            assert (figure in out) == (figure in sample)
        seen.add(out)
    assert len(seen) > 1
