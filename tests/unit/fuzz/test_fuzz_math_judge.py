"""Property tests (hypothesis) of the math judge: no expression that is not equal to the truth scores 1.

The answers are arithmetic expressions over integers (``+ - \\cdot / \\frac ^ **``, exponents up to
``6000`` and powers of powers), written bare, in ``$...$``, in ``\\boxed{}`` or after prose (short and
past ``max_expr_chars``), and they hold the truth as a leaf, the way a policy farming the reward
would write them (``144^{5000}``, ``144+10^{100000}``). The oracle is exact (Fractions); equal means
within the judge's documented tolerance (``rel_tol``, ``abs_tol``). The judge may refuse an equal
expression (a bound), never accept an unequal one. Runs through the judge's child process.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import accumulate

from fixtures.fuzz import fuzz
from hypothesis import given
from hypothesis import strategies as st

from streamgrpo.judge.config import MathSettings
from streamgrpo.judge.scorers.math import math_equal

_HUGE = 10**5000  # an oracle value past this is "huge": never within tolerance of a truth <= 1000


class _TooBig(Exception):
    """The exact value is far outside any truth the test draws."""


def _pow(base: Fraction, exp: Fraction) -> Fraction:
    if exp.denominator != 1 or (base == 0 and exp < 0):
        raise _TooBig  # irrational or undefined: the judge must not call it equal to an integer truth
    if abs(base) in (0, 1):
        return base ** int(exp)
    if abs(exp) > 20000:
        raise _TooBig
    value = base ** int(exp)
    if abs(value) > _HUGE or (value != 0 and abs(1 / value) > _HUGE):
        raise _TooBig
    return value


# a node is (latex text, exact value or None when too big); precedence is explicit with parentheses
def _leaf(truth: int) -> st.SearchStrategy[tuple[str, Fraction | None]]:
    return st.one_of(st.just(truth), st.integers(0, 1000), st.sampled_from([10, 2, 1, 0])).map(
        lambda n: (str(n), Fraction(n)))


def _combine(op: str, a: tuple[str, Fraction | None], b: tuple[str, Fraction | None]) -> tuple[str, Fraction | None]:
    (ta, va), (tb, vb) = a, b
    texts = {"+": f"({ta} + {tb})", "-": f"({ta} - {tb})", "*": f"({ta} \\cdot {tb})", "/": f"\\frac{{{ta}}}{{{tb}}}",
             "^": f"({ta})^{{{tb}}}", "**": f"{ta}**{tb}" if ta.isdigit() and tb.isdigit() else f"({ta})**({tb})"}
    if va is None or vb is None:
        return texts[op], None
    try:
        if op == "+":
            value: Fraction | None = va + vb
        elif op == "-":
            value = va - vb
        elif op == "*":
            value = va * vb
        elif op == "/":
            value = va / vb if vb != 0 else None
        else:
            value = _pow(va, vb)
    except _TooBig:
        value = None
    return texts[op], value


@st.composite
def _case(draw: st.DrawFn) -> tuple[str, int, Fraction | None]:
    truth = draw(st.integers(0, 1000))
    exponent = st.one_of(st.integers(-3, 12), st.integers(390, 6000)).map(lambda n: (str(n), Fraction(n)))
    ops = st.sampled_from(["+", "-", "*", "/", "^", "**"])

    def extend(inner: st.SearchStrategy[tuple[str, Fraction | None]]) -> st.SearchStrategy[tuple[str, Fraction | None]]:
        return st.one_of(
            st.tuples(ops, inner, inner).map(lambda t: _combine(*t)),
            st.tuples(inner, st.sampled_from(["^", "**"]), exponent).map(lambda t: _combine(t[1], t[0], t[2])),
        )

    text, value = draw(st.recursive(_leaf(truth), extend, max_leaves=5))
    depth = list(accumulate((c == "(") - (c == ")") for c in text))
    if text.startswith("(") and 0 not in depth[:-1] and draw(st.booleans()):  # outer brackets that match
        text = text[1:-1]
    wrap = draw(st.sampled_from(["{}", "${}$", "\\boxed{{{}}}", "The answer is {}", "The final answer is ${}$",
                                 "Working it out step by step: " + "we add and carry. " * 12 + "So {}"]))
    return wrap.format(text), truth, value


def _equal(value: Fraction, truth: int, s: MathSettings) -> bool:
    return abs(value - truth) <= max(Fraction(s.rel_tol) * max(abs(value), abs(truth)), Fraction(s.abs_tol))


@fuzz()
@given(_case())
def test_no_expression_unequal_to_the_truth_scores_one(case: tuple[str, int, Fraction | None]) -> None:
    answer, truth, value = case
    settings = MathSettings()
    if math_equal(answer, [str(truth)], settings):
        assert value is not None and _equal(value, truth, settings), (answer, truth, value)


def test_the_reported_farming_answers_score_zero() -> None:
    # issue 24 finding 7: each scored 1.0 (the exponent over max_exponent fell back to the bare base)
    for answer, truth in [("144^{5000}", "144"), ("144+10^{100000}", "144"), ("1 + 144^{5000}", "144"),
                          ("2^{999}", "2"), ("144**5000", "144"), ("The answer is 144^{5000}", "144"),
                          ("$144^{5000}$", "144"), ("1.44e5000", "1.44"), ("144^{2^{9}}", "144"),
                          ("We reason at length. " * 10 + "144^{5000}", "144"), ("12**2", "12")]:
        assert not math_equal(answer, [truth]), answer
