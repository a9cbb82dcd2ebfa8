"""The two submission-loop tasks: reproduce a black-box function, find a factor that holds out.

Each task derives its public material from the session's public seed and its hidden cases
from the hidden seed, which never leaves the verifier: the agent sees the brief and the public
verifier's feedback only.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, Field

from services.verifier.submission.expression import ExpressionError, compile_expression


class BadSubmission(ValueError):
    """The submission does not fit the task's format: a 4xx naming the problem."""


class Feedback(BaseModel):
    score: float = Field(
        description="Public score in [0, 1] (the hidden verifier decides the reward)."
    )
    details: dict[str, Any] = Field(default_factory=dict)


class SubmissionTask(Protocol):
    name: str
    description: str
    free_submissions: int
    max_submissions: int
    penalty_per_extra: float

    def brief(self, public_seed: int, hidden_seed: int) -> dict[str, Any]: ...
    def public_check(
        self, public_seed: int, hidden_seed: int, submission: dict[str, Any]
    ) -> Feedback: ...
    def hidden_score(
        self, public_seed: int, hidden_seed: int, submission: dict[str, Any]
    ) -> float: ...


class BlackBoxFunction:
    """Reproduce an integer function from probes. f(x) = a x^2 + b x + c when x mod m == r,
    else d x + e (all drawn from the hidden seed). Submit an expression in ``x``
    (:mod:`~services.verifier.submission.expression`) and up to 16 probe points in [-100, 100];
    the public verifier answers the probes and compares the expression on 12 public points;
    the hidden verifier compares it on 400 unseen points in [-10**6, 10**6]."""

    name = "blackbox_function"
    description = __doc__ or ""
    free_submissions = 4
    max_submissions = 12
    penalty_per_extra = 0.05
    probe_range = 100
    max_probes = 16

    @staticmethod
    def _params(hidden_seed: int) -> tuple[int, ...]:
        g = np.random.default_rng(hidden_seed)
        a, b, c, d, e = (int(v) for v in g.integers(-9, 10, size=5))
        m = int(g.integers(2, 6))
        r = int(g.integers(0, m))
        return a or 1, b, c, d or 2, e, m, r

    def _f(self, hidden_seed: int, x: int) -> int:
        a, b, c, d, e, m, r = self._params(hidden_seed)
        return a * x * x + b * x + c if x % m == r else d * x + e

    def _public_points(self, public_seed: int) -> list[int]:
        return [
            int(v)
            for v in np.random.default_rng(public_seed).integers(
                -self.probe_range, self.probe_range + 1, 12
            )
        ]

    def _hidden_points(self, hidden_seed: int) -> list[int]:
        return [
            int(v)
            for v in np.random.default_rng(hidden_seed ^ 0x5EED).integers(-(10**6), 10**6 + 1, 400)
        ]

    def brief(self, public_seed: int, hidden_seed: int) -> dict[str, Any]:
        return {
            "task": self.name,
            "description": self.description,
            "submission_format": {
                "expression": "integer expression in x",
                "probes": f"up to {self.max_probes} ints in ±{self.probe_range}",
            },
        }

    def _compile(self, submission: dict[str, Any]):
        expr = submission.get("expression")
        if not isinstance(expr, str) or not expr.strip():
            raise BadSubmission("'expression' must be a non-empty string")
        try:
            return compile_expression(expr)
        except ExpressionError as exc:
            raise BadSubmission(f"expression: {exc}") from None

    @staticmethod
    def _safe(fn, x: int) -> int | None:
        try:
            return fn(x)
        except ExpressionError:
            return None

    def public_check(
        self, public_seed: int, hidden_seed: int, submission: dict[str, Any]
    ) -> Feedback:
        fn = self._compile(submission)
        probes = submission.get("probes", [])
        if not isinstance(probes, list) or len(probes) > self.max_probes:
            raise BadSubmission(f"'probes' must be a list of at most {self.max_probes} integers")
        if any(
            not isinstance(p, int) or isinstance(p, bool) or abs(p) > self.probe_range
            for p in probes
        ):
            raise BadSubmission(
                f"every probe must be an integer in [-{self.probe_range}, {self.probe_range}]"
            )
        cases = []
        for x in self._public_points(public_seed):
            want, got = self._f(hidden_seed, x), self._safe(fn, x)
            cases.append({"x": x, "expected": want, "got": got, "ok": want == got})
        return Feedback(
            score=sum(c["ok"] for c in cases) / len(cases),
            details={
                "cases": cases,
                "probes": [{"x": p, "f": self._f(hidden_seed, p)} for p in probes],
            },
        )

    def hidden_score(self, public_seed: int, hidden_seed: int, submission: dict[str, Any]) -> float:
        fn = self._compile(submission)
        pts = self._hidden_points(hidden_seed)
        return sum(self._safe(fn, x) == self._f(hidden_seed, x) for x in pts) / len(pts)


class HeldOutFactor:
    """Find a linear factor (weights over 12 features) whose rank correlation with the next
    return holds out of sample. The brief carries 80 public rows; the hidden verifier scores the
    factor's Spearman correlation on 4000 unseen rows, relative to the true signal's."""

    name = "heldout_factor"
    description = __doc__ or ""
    free_submissions = 3
    max_submissions = 10
    penalty_per_extra = 0.05
    features = 12
    public_rows = 80
    hidden_rows = 4000

    @staticmethod
    def _truth(hidden_seed: int) -> np.ndarray:
        g = np.random.default_rng(hidden_seed)
        w = np.zeros(HeldOutFactor.features)
        idx = g.choice(HeldOutFactor.features, size=3, replace=False)
        w[idx] = g.choice([-1.0, 1.0], size=3) * g.uniform(0.5, 1.0, size=3)
        return w

    def _rows(self, seed: int, n: int, hidden_seed: int) -> tuple[np.ndarray, np.ndarray]:
        g = np.random.default_rng(seed)
        x = g.standard_normal((n, self.features))
        y = x @ self._truth(hidden_seed) + 2.5 * g.standard_t(4, size=n)
        return x, y

    def brief(self, public_seed: int, hidden_seed: int) -> dict[str, Any]:
        """The public rows: drawn from the same hidden truth as the held-out rows, never the same rows."""
        x, y = self._rows(public_seed, self.public_rows, hidden_seed)
        return {
            "task": self.name,
            "description": self.description,
            "submission_format": {"weights": f"{self.features} finite floats"},
            "features": np.round(x, 6).tolist(),
            "next_return": np.round(y, 6).tolist(),
        }

    def _weights(self, submission: dict[str, Any]) -> np.ndarray:
        w = submission.get("weights")
        if not isinstance(w, list) or len(w) != self.features:
            raise BadSubmission(f"'weights' must be a list of {self.features} numbers")
        if any(
            isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) for v in w
        ):
            raise BadSubmission("every weight must be a finite number")
        arr = np.asarray(w, dtype=float)
        if not np.any(arr):
            raise BadSubmission("the weights are all zero")
        return arr

    @staticmethod
    def _spearman(a: np.ndarray, b: np.ndarray) -> float:
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        return float(np.corrcoef(ra, rb)[0, 1])

    def public_check(
        self, public_seed: int, hidden_seed: int, submission: dict[str, Any]
    ) -> Feedback:
        w = self._weights(submission)
        x, y = self._rows(public_seed, self.public_rows, hidden_seed)
        f = x @ w
        half = self.public_rows // 2
        ic = self._spearman(f, y)
        return Feedback(
            score=max(0.0, ic),
            details={
                "ic": ic,
                "ic_first_half": self._spearman(f[:half], y[:half]),
                "ic_second_half": self._spearman(f[half:], y[half:]),
            },
        )

    def hidden_score(self, public_seed: int, hidden_seed: int, submission: dict[str, Any]) -> float:
        w = self._weights(submission)
        x, y = self._rows(hidden_seed ^ 0xF00D, self.hidden_rows, hidden_seed)
        best = self._spearman(x @ self._truth(hidden_seed), y)
        return float(min(1.0, max(0.0, self._spearman(x @ w, y) / best)))


TASKS: dict[str, Any] = {t.name: t for t in (BlackBoxFunction(), HeldOutFactor())}
