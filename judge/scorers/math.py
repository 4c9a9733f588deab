"""The `math` judge: is the model's final answer numerically/symbolically equal to a ground truth?

Extraction and parsing live in :mod:`mathparse`. Equality:
- numbers: ``|a - b| <= max(rel_tol * max(|a|, |b|), abs_tol)`` (default rel 1e-6: "3.14159" equals
  pi, "3.14" does not; "0.333" does not equal 1/3);
- percentages: "50%" equals 50, and also 0.5 when ``percent_as_fraction``;
- expressions with variables: equal values at fixed probe points (no ``simplify``: bounded time);
- tuples: same length, element-wise equal.
Score 1.0 when any ground truth matches, else 0.0. A ground truth that does not parse never matches.

What is not covered: partial credit, answers that are words ("seven"), the checks in mathparse's
"not covered" list.
"""

from __future__ import annotations

import cmath
from collections.abc import Sequence

import sympy

from streamgrpo.judge.config import MathSettings
from streamgrpo.judge.scorers.base import Candidate, Score, SingleScorer, rubric_hash
from streamgrpo.judge.scorers.mathparse import MathValue, extract_value

RUBRIC_VERSION = "math-v1"
_PROBES = (0.3719, 1.2913, 2.7183, -0.8171)


def _close(a: complex, b: complex, rel_tol: float, abs_tol: float) -> bool:
    if not (cmath.isfinite(a) and cmath.isfinite(b)):
        return a == b
    return abs(a - b) <= max(rel_tol * max(abs(a), abs(b)), abs_tol)


def _numeric(expr: sympy.Basic, subs: dict[sympy.Symbol, float] | None = None) -> complex | None:
    try:
        value = sympy.N(expr.subs(subs) if subs else expr, 30)
        return complex(value)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError):
        return None


def _expr_equal(a: sympy.Basic, b: sympy.Basic, rel_tol: float, abs_tol: float) -> bool:
    if isinstance(a, sympy.Tuple) or isinstance(b, sympy.Tuple):
        if not (isinstance(a, sympy.Tuple) and isinstance(b, sympy.Tuple)) or len(a) != len(b):
            return False
        return all(_expr_equal(x, y, rel_tol, abs_tol) for x, y in zip(a, b, strict=True))
    if a.is_Number and b.is_Number:  # fast path (exact rationals and floats)
        try:
            return _close(complex(float(a)), complex(float(b)), rel_tol, abs_tol)
        except OverflowError:
            pass
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    if not symbols:
        va, vb = _numeric(a), _numeric(b)
        return va is not None and vb is not None and _close(va, vb, rel_tol, abs_tol)
    if a.free_symbols != b.free_symbols:
        return False
    checked = 0
    for k, probe in enumerate(_PROBES):
        subs = {s: probe + 0.137 * i + 0.01 * k for i, s in enumerate(symbols)}
        va, vb = _numeric(a, subs), _numeric(b, subs)
        if va is None or vb is None or not (cmath.isfinite(va) and cmath.isfinite(vb)):
            continue
        if not _close(va, vb, rel_tol, abs_tol):
            return False
        checked += 1
    return checked > 0


def values_equal(answer: MathValue, truth: MathValue, settings: MathSettings) -> bool:
    """Equality of two parsed values under the tolerance and percent rules above."""
    candidates = [answer.expr]
    if answer.percent and settings.percent_as_fraction and not truth.percent:
        candidates.append(answer.expr / 100)
    if truth.percent and settings.percent_as_fraction and not answer.percent:
        candidates.append(answer.expr * 100)
    return any(_expr_equal(c, truth.expr, settings.rel_tol, settings.abs_tol) for c in candidates)


def math_equal(answer: str, truths: Sequence[str], settings: MathSettings | None = None) -> bool | None:
    """True/False when the answer parses; None when no number or expression can be read from it."""
    settings = settings or MathSettings()
    bounds = {"max_chars": settings.max_expr_chars, "max_exponent": settings.max_exponent}
    got = extract_value(answer, **bounds)
    if got is None:
        return None
    for truth in truths:
        want = extract_value(truth, **bounds)
        if want is not None and values_equal(got, want, settings):
            return True
    return False


class MathScorer(SingleScorer):
    """Binary math correctness (1.0 / 0.0) against any of the ground truths."""

    name = "math"
    needs_ground_truth = True
    context_free = True

    def __init__(self, settings: MathSettings | None = None) -> None:
        self.settings = settings or MathSettings()
        self.rubric_hash = rubric_hash(RUBRIC_VERSION, self.settings.model_dump_json())

    def score(self, candidate: Candidate) -> Score:
        verdict = math_equal(candidate.answer, candidate.ground_truths, self.settings)
        value = 1.0 if verdict else 0.0
        components = [("math_correct", value, 1.0)]
        if verdict is None:
            components.append(("math_unparsed", 1.0, 0.0))
        return Score(value, tuple(components), self.name, self.rubric_hash, None, bool(verdict))
