"""The `math` judge: is the model's final answer mathematically equal to a ground truth?

Reading and comparing are math-verify's (HuggingFace's verifier, used by open-r1 and TRL): LaTeX via
latex2sympy2_extended's grammar; string, numeric, symbolic, set/interval, relation, matrix equality.
Adapter: a text without delimiters of its own (``$``, ``\\(``, ``\\[``, ``\\boxed``) is also read whole
as one LaTeX expression (``$text$``, at most ``max_expr_chars``), besides math-verify's extraction
(boxed, "final answer is", LaTeX environments, last number). A truth's whole reading wins; an
answer's whole reading wins when its free symbols all occur in the truth ("2x+1" is an expression,
"I don't know" is not the product I*d*o*n*...). Overrides, where math-verify alone is wrong for
this judge (each has a test case):
1. plain numbers compare by relative tolerance (``rel_tol``, ``abs_tol``), two exact rationals
   exactly: math-verify rounds floats to 6 decimals (3.14159 != pi, 1e-7 == 4e-7);
2. a whole answer "1.5e3" / "2e-3" (Python's float notation, what the calculator prints) is
   1.5*10^3: math-verify reads the e as Euler's number, or stops at it (1.5);
3. a whole answer "3 1/2" is the mixed number 7/2 (math-verify: 2);
4. "50%" equals 50, and 0.5 only with ``percent_as_fraction`` (math-verify: always both).
Bounds, before parsing: over ``_MAX_POWERS`` powers, brackets deeper than ``_MAX_DEPTH``, a
literal exponent (``^``, ``**``, ``e``) over ``max_exponent`` or an exponent that holds a power read
nothing; only the last ``_MAX_TEXT`` characters are read; after parsing, a reading with an exponent
over ``max_exponent`` refuses the whole answer before any comparison: an expression whose value
cannot be evaluated within the bounds scores 0, never as a bare number read from part of it
(``144^{5000}`` is not 144). :func:`check` runs in a child process
(:mod:`isolated`; math-verify's own ``signal.alarm`` timeout fails off the main thread): a soft
budget ``_BUDGET_S``, a hard deadline that kills it, 2 GiB of address space; any thread may call.
Score 1.0 when any ground truth matches, else 0.0.

What is not covered: partial credit, words for numbers ("seven"), unit conversion (units are
dropped), scientific notation inside prose ("about 1.5e3 m" reads 1.5).
"""

from __future__ import annotations

import cmath
import functools
import logging
import re
from collections.abc import Sequence
from importlib.metadata import version
from itertools import accumulate
from typing import Any

import sympy

from streamgrpo.judge.config import MathSettings
from streamgrpo.judge.errors import ScoringError
from streamgrpo.judge.scorers.base import Candidate, Score, SingleScorer, rubric_hash
from streamgrpo.judge.scorers.isolated import DeadlineExceeded, IsolatedCallError, IsolatedFunction

RUBRIC_VERSION = "math-v3"
_BUDGET_S, _HARD_S, _MEM = 10.0, 30.0, 2 << 30  # math-verify's own defaults: 5 s parse + 5 s compare
_MAX_TEXT, _MAX_POWERS, _MAX_DEPTH = 4000, 12, 12
_DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox")
_SCI = re.compile(r"(-?\d+(?:\.\d+)?)[eE]([-+]?\d+)")
_MIXED = re.compile(r"(-?)(\d+)\s+(\d+)\s*/\s*(\d+)")
_OPEN, _CLOSE = "({[", ")}]"
_EXPONENT = re.compile(r"\^\s*[{(]?\s*[-+]?\s*(\d+)|\d[eE][-+]?(\d+)")
_JOIN_BEFORE = ("+", "-", "*", "/", "^", "\\cdot", "\\times", "\\div", "\u00d7", "\u00f7", "\u00b7")
_JOIN_AFTER = ("+", "-", "*", "/", "^", "!", "\\cdot", "\\times", "\\div", "\u00d7", "\u00f7", "\u00b7")
_TOWER = re.compile(r"\^\s*[{(][^})]*\^")
log = logging.getLogger(__name__)


def _hostile(text: str, max_exponent: int) -> bool:
    """Too many powers, too deep brackets, a literal exponent over the bound or a power in an exponent:
    refused unread (the grammar and sympy blow up on them; a reader would see only the base)."""
    depth = max(accumulate((c in _OPEN) - (c in _CLOSE) for c in text), default=0)
    if text.count("^") > _MAX_POWERS or depth > _MAX_DEPTH or _TOWER.search(text):
        return True
    return any(int(m[1] or m[2]) > max_exponent for m in _EXPONENT.finditer(text))


def _rewrite_whole(text: str, max_exponent: int) -> str | None:
    """Overrides 2 and 3 (the whole answer is a float literal or a mixed number); None: refuse it."""
    if m := _SCI.fullmatch(text):
        return f"{m[1]}\\times 10^{{{int(m[2])}}}" if abs(int(m[2])) <= max_exponent else None
    if m := _MIXED.fullmatch(text):
        return f"{m[1]}({m[2]}+\\frac{{{m[3]}}}{{{m[4]}}})"
    return text


def _powers_bounded(expr: Any, max_exponent: int) -> bool:
    """Reject power towers and huge literal exponents before anything is evaluated (post-order walk)."""
    if not isinstance(expr, sympy.Basic):
        return True
    if not all(_powers_bounded(arg, max_exponent) for arg in expr.args):
        return False
    if isinstance(expr, sympy.Pow) and not expr.exp.free_symbols:
        try:
            return abs(complex(sympy.N(expr.exp, 15))) <= max_exponent
        except (TypeError, ValueError, OverflowError):
            return False
    return True


def _brace_exponents(text: str) -> str:
    """``a^(b + c)`` -> ``a^{(b + c)}``: LaTeX takes one token after ``^`` (its grammar read
    ``(0)^((0 + 0))`` as 0); an unmatched bracket is left as it is."""
    out, i = [], 0
    for m in re.finditer(r"\^\s*\(", text):
        if m.start() < i:
            continue
        depth, end = 0, None
        for j in range(m.end() - 1, len(text)):
            depth += (text[j] == "(") - (text[j] == ")")
            if depth == 0:
                end = j
                break
        if end is not None:
            out.append(f"{text[i:m.start()]}^{{{text[m.end() - 1:end + 1]}}}")
            i = end + 1
    return "".join(out) + text[i:]


class _Refused(Exception):
    """A reading holds a value that cannot be evaluated within the bounds: the whole answer reads nothing."""


def _fragment(text: str, source: str) -> bool:
    """An extraction that is part of a larger expression: its source has unbalanced brackets ("1) + 1)"
    from "((1 + 1) + 1)"), or an operator joins one of its places in the text to a neighbour ("0" of
    "(0 + 0)^{0}"). A source math-verify normalised ("1,250" -> "1250") has no place to look at."""
    depth = list(accumulate((c in _OPEN) - (c in _CLOSE) for c in source))
    if depth and (min(depth) < 0 or depth[-1] != 0):
        return True
    for m in re.finditer(rf"(?<![\w.]){re.escape(source)}(?![\w.])", text) if source else ():
        before, after = text[: m.start()].rstrip(), text[m.end():].lstrip()
        if before.endswith(_JOIN_BEFORE) or after.startswith(_JOIN_AFTER):
            return True
    return False


def _first(parsed: list[Any], max_exponent: int, text: str) -> Any:
    """The sympy value of a math-verify reading (it is [value, source string]) of ``text``; None when
    unread or when the reading is a fragment of a larger expression in the text.

    Raises _Refused when the reading is over the bounds (no other reading of that text may stand in)."""
    value = parsed[0] if parsed else None
    if not isinstance(value, (sympy.Basic, sympy.MatrixBase)):
        return None
    if isinstance(parsed[1], str) and _fragment(text, parsed[1]):
        return None
    if not _powers_bounded(value, max_exponent):
        raise _Refused
    return value


def _number(expr: Any) -> tuple[Any, bool] | None:
    """(value, written with %) of a plain number: an exact Rational, else a complex; None otherwise."""
    from math_verify.grader import get_pct_val

    pct = get_pct_val(expr)
    inner = expr if pct is None else pct
    if not isinstance(inner, sympy.Expr) or inner.free_symbols:
        return None
    try:
        exact = inner.doit()
        return (exact if isinstance(exact, sympy.Rational) else complex(sympy.N(inner, 30))), pct is not None
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError):
        return None


def _close(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    """Exact for two Rationals (1000001 != 1000000); else |a - b| <= max(rel_tol * max(|a|, |b|), abs_tol)."""
    if isinstance(a, sympy.Rational) and isinstance(b, sympy.Rational) or not cmath.isfinite(complex(a)):
        return bool(a == b)
    a, b = complex(a), complex(b)
    return cmath.isfinite(b) and abs(a - b) <= max(rel_tol * max(abs(a), abs(b)), abs_tol)


def _numbers_equal(got: tuple[Any, bool], want: tuple[Any, bool], s: dict[str, Any]) -> bool:
    """Overrides 1 and 4: relative tolerance, percent read as a fraction only when configured."""
    (a, a_pct), (b, b_pct) = got, want
    candidates = [a] + ([a / 100 if a_pct else a * 100] if s["percent_as_fraction"] and a_pct != b_pct else [])
    return any(_close(c, b, s["rel_tol"], s["abs_tol"]) for c in candidates)


@functools.lru_cache(maxsize=4096)
def _read(text: str, max_expr_chars: int, max_exponent: int) -> tuple[Any, Any]:
    """(whole reading, extraction reading) of one text; either may be None (cached: sympy values are immutable)."""
    from math_verify import parse

    text = _brace_exponents(text.strip()[-_MAX_TEXT:].replace("**", "^"))  # LaTeX reads "$12**2$" as 12
    if _hostile(text, max_exponent):
        return None, None
    whole = None
    try:
        if not _DELIMITED.search(text) and len(text) <= max_expr_chars:
            rewritten = _rewrite_whole(text, max_exponent)
            if rewritten is None:
                return None, None
            whole = _first(parse(f"${rewritten}$", parsing_timeout=None), max_exponent, rewritten)  # type: ignore[arg-type]
        extracted = _first(parse(text, parsing_timeout=None), max_exponent, text)  # type: ignore[arg-type]
    except _Refused:
        return None, None
    return whole, extracted


def check(answer: str, truths: tuple[str, ...], s: dict[str, Any]) -> bool | None:
    """The verdict (runs in the child process): True/False; None when the answer reads as nothing."""
    from math_verify import verify

    bounds = (s["max_expr_chars"], s["max_exponent"])
    whole, extracted = _read(answer, *bounds)
    read = extracted is not None  # else only a whole reading that compares with some truth counts
    for truth in truths:
        gold_whole, gold_extracted = _read(truth, *bounds)
        gold = gold_whole if gold_whole is not None else gold_extracted
        if gold is None:
            continue
        symbols: set[Any] = getattr(gold, "free_symbols", set())
        got = whole if whole is not None and whole.free_symbols <= symbols else extracted
        if got is None:
            continue
        read = True
        a, b = _number(got), _number(gold)
        if a is not None and b is not None:
            if _numbers_equal(a, b, s):
                return True
        elif verify(gold, got, timeout_seconds=None):
            return True
    return False if read else None


def _warm() -> None:
    """Child start: import math-verify, compile its patterns, set up sympy's simplify (~1 s the first time)."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" warning: ours is on
    check("x^2-1", ("(x-1)(x+1)",), MathSettings().model_dump())


@functools.cache
def _verifier() -> IsolatedFunction:
    """The process-wide child that runs :func:`check` (started on the first call)."""
    return IsolatedFunction(check, soft_s=_BUDGET_S, hard_s=_HARD_S, mem_bytes=_MEM, init=_warm)


def math_equal(answer: str, truths: Sequence[str], settings: MathSettings | None = None) -> bool | None:
    """True/False when the answer reads; None when nothing can be read from it within the bounds."""
    try:
        return _verifier()(answer, tuple(truths), (settings or MathSettings()).model_dump())  # type: ignore[no-any-return]
    except DeadlineExceeded as exc:
        log.warning("math check refused: %s", exc)
        return None
    except IsolatedCallError as exc:
        raise ScoringError(f"math judge failed: {exc}") from exc


_NON_MATH_WORD = re.compile(r"(?<![A-Za-z\\])(?!(?:sqrt|pi|sin|cos|tan|log|ln|exp)\b)[A-Za-z]{2,}")
_NUMBER_AND_UNIT = re.compile(r"\s*-?[\d.,/]*\d\s*%?\s*[A-Za-z]+\.?\s*")


@functools.lru_cache(maxsize=8192)
def is_math_truth(text: str) -> bool:
    """True when a ground truth is mathematical: it has a digit, a LaTeX command or a lone letter and no
    words ("x = 5", "\\pi", "(1, 2)"), or it is a number plus one unit word ("12 cm")."""
    if not re.search(r"\d|\\[A-Za-z]|(?<![A-Za-z])[A-Za-z](?![A-Za-z])", text):
        return False
    return not _NON_MATH_WORD.search(text) or _NUMBER_AND_UNIT.fullmatch(text) is not None


class MathScorer(SingleScorer):
    """Binary math correctness (1.0 / 0.0) against any of the ground truths."""

    name = "math"
    needs_ground_truth = True
    context_free = True

    def __init__(self, settings: MathSettings | None = None) -> None:
        self.settings = settings or MathSettings()
        self.rubric_hash = rubric_hash(RUBRIC_VERSION, self.settings.model_dump_json(),
                                       f"math-verify {version('math-verify')}",
                                       f"latex2sympy2_extended {version('latex2sympy2_extended')}")

    def score(self, candidate: Candidate) -> Score:
        verdict = math_equal(candidate.answer, candidate.ground_truths, self.settings)
        value = 1.0 if verdict else 0.0
        components = [("math_correct", value, 1.0)]
        if verdict is None:
            components.append(("math_unparsed", 1.0, 0.0))
        return Score(value, tuple(components), self.name, self.rubric_hash, None, bool(verdict))
