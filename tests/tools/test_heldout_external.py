"""The oracle with its verdict sentences said in held-out words (issue 27).

Two sets, each written by someone who had not read the verdict reader:
``tests.tools.heldout_external`` (first run: 5 of 16 scenarios under 95% at seed 0, from 9
phrasings; the reader was then fixed for those classes of language, so it is a regression set
now) and ``tests.tools.heldout_blind2`` (written after that fix, never used to tune the reader:
the measurement). Through either, the oracle (same actions, recipients and values) must pass
>= 95% of the events on every scenario at seed 0.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.tools.scenarios import SCENARIOS, get_scenario
from services.tools.scenarios.drive import LocalDriver
from services.tools.scenarios.oracle import run_oracle
from tests.tools.heldout import _REF, RULES, Paraphrasing
from tests.tools.heldout_blind2 import paraphrase_blind2
from tests.tools.heldout_external import KINDS, RULES_EXTERNAL, paraphrase_external

LIBRARY = sorted(n for n in SCENARIOS if n != "empty")

# What the oracle says today, one per kind (in the order of ``RULES``).
ORIGINALS = {
    "yes": "LV-3011 is approved:",
    "no": "LV-3011 is declined:",
    "late_yes": "it is approved after all:",
    "late_no": "I have to correct my earlier answer. It is declined after all:",
    "final_yes": "LV-3011: approved (final).",
    "final_no": "LV-3011: declined (final).",
}
WITH_REF = {"yes", "no", "final_yes", "final_no"}


def test_each_pattern_is_paired_with_its_kind() -> None:
    assert len(RULES_EXTERNAL) == len(RULES) == len(KINDS)
    for (pattern, forms), (kind, own) in zip(RULES_EXTERNAL, KINDS.items(), strict=True):
        assert forms is own
        assert pattern.fullmatch(ORIGINALS[kind]), kind
        others = [o for k, o in ORIGINALS.items() if k != kind]
        assert not any(pattern.search(o) for o in others), kind


@pytest.mark.parametrize("kind", list(KINDS))
def test_external_phrasings_keep_the_shape(kind: str) -> None:
    forms = KINDS[kind]
    assert len(forms) >= 12 and len(set(forms)) == len(forms), kind
    end = ORIGINALS[kind][-1]
    for form in forms:
        assert form.endswith(end), form
        said = form.format(ref="LV-3011")
        assert ("LV-3011" in said) == (kind in WITH_REF), form
        if kind in WITH_REF:
            assert re.search(_REF, said), form
        assert "{" not in said and "}" not in said, form
        # a phrasing is never itself an oracle sentence (a later rule would swap it again)
        assert not any(p.search(said) for p, _ in RULES), form


def test_paraphrase_external_changes_the_words_not_the_figures() -> None:
    rng = random.Random(1)
    text = "Hi Ana, LV-3011 is declined: 21 days is over the maximum leave block of 18 days."
    out = paraphrase_external(text, rng)
    assert out != text and "LV-3011" in out
    assert out.startswith("Hi Ana, ") and out.endswith(
        " 21 days is over the maximum leave block of 18 days."
    )
    assert out.removeprefix("Hi Ana, ").split(" 21 days")[0] in [
        f.format(ref="LV-3011") for f in KINDS["no"]
    ]
    late = "Update on LV-3011: good news, it is approved after all: it falls under the rule."
    out = paraphrase_external(late, rng)
    assert out != late and out.startswith("Update on LV-3011: good news, ")
    assert paraphrase_external("Approved: LV-1, LV-2.", rng) == "Approved: LV-1, LV-2."


@dataclass
class Recorder:
    """A held-out set's paraphrase that keeps every statement it changed (for the failure
    message: which phrasing a failing event was answered with)."""

    rephrase: Any = paraphrase_external
    swaps: list[tuple[str, str]] = field(default_factory=list)
    verdicts: int = 0  # statements with an oracle verdict sentence in them

    def __call__(self, text: str, rng: random.Random) -> str:
        new = self.rephrase(text, rng)
        self.verdicts += any(p.search(text) for p, _ in RULES)
        if new != text:
            self.swaps.append((text, new))
        return new


SETS = {"external": paraphrase_external, "blind2": paraphrase_blind2}


def _run(
    db: Any, name: str, seed: int, words: str = "external"
) -> tuple[Any, Paraphrasing, Recorder]:
    inst = get_scenario(name).build(seed)
    rec = Recorder(SETS[words])
    driver = Paraphrasing(
        LocalDriver.create(db, name, seed),
        random.Random(f"{words}:{name}:{seed}"),
        rephrase=rec,
    )
    run_oracle(driver, inst)
    return driver.report(), driver, rec


def _failures(report: Any, rec: Recorder) -> dict[str, Any]:
    failed = {}
    for e in report.events:
        if not e.passed:
            failed[e.event_id] = {
                "status": str(e.status),
                "checks": [(c.id, c.description, c.detail) for c in e.checks if not c.passed],
            }
    return {"failed": failed, "said": [new for _, new in rec.swaps]} if failed else {}


def _check(
    db: Any, name: str, seed: int, words: str = "external"
) -> tuple[int, int, dict[str, Any]]:
    report, driver, rec = _run(db, name, seed, words)
    assert rec.verdicts > 0, name  # every scenario of the library has verdicts to give
    assert driver.rewritten == rec.verdicts > 0, (name, seed)  # each one was rephrased
    return report.events_passed, report.events_total, _failures(report, rec)


@pytest.mark.parametrize("words", list(SETS))
@pytest.mark.parametrize("name", LIBRARY)
def test_heldout_paraphrased_oracle_passes_95_percent(tools_client, name: str, words: str) -> None:
    passed, total, why = _check(tools_client.app.state.db, name, 0, words)
    assert passed >= 0.95 * total, (name, words, f"{passed}/{total}", why)
