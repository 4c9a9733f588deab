"""Turning free-form math answers into sympy values, safely and within size bounds.

Pipeline for an answer: (1) the last ``\\boxed{}``/``\\fbox{}`` if any (parsed whole, else its last
number); else (2) the span after the last "answer is"/"answer:" (parsed whole, else its FIRST
number: "The answer is 17 because 10 + 7 = 17"); else (3) the whole text (parsed whole, else its
LAST number). "Parsed whole" means: common LaTeX converted to plain syntax (``\\frac``/``\\dfrac``/
``\\tfrac``, ``\\sqrt``, ``\\cdot``, ``\\times``, ``\\pi``, ``^``, ``\\text{}``, degrees, ``$``), the
right-hand side of the last ``=`` kept ("x = 5"), thousands separators dropped ("1,000"), a
trailing % read as a percentage, mixed numbers ("3 1/2") read, then ``parse_expr`` under a
whitelist of characters and identifiers (single letters, sqrt, pi, e, log/ln, exp, sin/cos/tan),
with empty builtins (no attribute access, no strings), a length bound, and a post-order check
that refuses power towers and exponents above ``max_exponent`` before anything is evaluated.
Numbers found by the fallback: integers, decimals, "1,000", scientific notation, a/b.

What is covered: numbers, fractions, radicals, pi/e, simple expressions with variables, tuples.
What is not covered: intervals, matrices, sets with set-builder notation, inequalities, units
conversion (units are dropped, not converted), words for numbers ("seven"), ``\\pm``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from tokenize import TokenError

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor)
_FUNCS = {
    "sqrt": sympy.sqrt, "pi": sympy.pi, "e": sympy.E, "log": sympy.log, "ln": sympy.log, "exp": sympy.exp,
    "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "oo": sympy.oo,
}
_LETTERS = {c: sympy.Symbol(c) for c in "abcdfghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"}
_GLOBALS = {
    "__builtins__": {}, "Integer": sympy.Integer, "Float": sympy.Float, "Rational": sympy.Rational,
    "Symbol": sympy.Symbol, "Function": sympy.Function, "Add": sympy.Add, "Mul": sympy.Mul, "Pow": sympy.Pow,
    "Tuple": sympy.Tuple,
}
_ALLOWED_CHARS = re.compile(r"^[0-9A-Za-z+\-*/^().,\s]*$")
_IDENT = re.compile(r"[A-Za-z]+")
_NUMBER = re.compile(r"(?<![\w.])(-?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:[eE]([-+]?\d+))?(?:\s*/\s*(\d+))?")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MARKER = re.compile(r"(?:final answer|answer)\s*(?:is|:|=)\s*:?\s*(.+)$", re.IGNORECASE | re.DOTALL)
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MIXED = re.compile(r"^(-?\d+)\s+(\d+)\s*/\s*(\d+)$")


@dataclass(frozen=True)
class MathValue:
    """A parsed answer: a sympy expression or tuple; ``percent`` when it was written with %."""

    expr: sympy.Basic
    percent: bool = False
    source: str = ""


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Content of the brace group opening at ``text[start] == '{'`` and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), nested braces allowed."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    got = _braced(text, matches[-1].end() - 1)
    return got[0] if got else None


def _replace_command_args(text: str, command: str, nargs: int, fmt: str) -> str:
    """Replace ``\\command{a}{b}`` (nargs brace groups; a bare digit also counts) by ``fmt``."""
    pattern = re.compile(r"\\" + command + r"(?![A-Za-z])\s*")
    for _ in range(50):  # bounded: nested commands are rewritten innermost-last
        m = pattern.search(text)
        if not m:
            break
        pos, args = m.end(), []
        for _ in range(nargs):
            while pos < len(text) and text[pos] == " ":
                pos += 1
            if pos < len(text) and text[pos] == "{":
                got = _braced(text, pos)
                if got is None:
                    return text
                args.append(got[0])
                pos = got[1]
            elif pos < len(text) and text[pos].isalnum():
                args.append(text[pos])
                pos += 1
            else:
                return text
        text = text[: m.start()] + fmt.format(*args) + text[pos:]
    return text


_SIMPLE_LATEX = (
    (r"\\(?:displaystyle|left|right|bigl|bigr|Bigl|Bigr|big|Big)", ""),
    (r"\\[!,;: ]|\\q?quad|~", " "),
    (r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree", ""),
    (r"\\%", "%"),
    (r"\\cdot|\\times|×|·|\\ast", "*"),
    (r"\\div|÷", "/"),
    (r"\\pi(?![A-Za-z])|π", " pi "),
    (r"\\infty|∞", " oo "),
    (r"\\ln(?![A-Za-z])", " log"),
    (r"\\(log|sin|cos|tan|exp)(?![A-Za-z])", r" \1"),
    (r"−|–", "-"),
    (r"\\dfrac|\\tfrac", r"\\frac"),
)


def latex_to_plain(text: str) -> str:
    """Convert the common LaTeX of final answers to plain infix syntax (``^`` kept, braces -> parens)."""
    s = text.strip()
    for wrap in (r"\(", r"\)", r"\[", r"\]", "$"):
        s = s.replace(wrap, " ")
    for cmd in ("text", "textbf", "mathrm", "mathbf", "mbox", "operatorname"):
        s = _replace_command_args(s, cmd, 1, " {0} ")
    for pattern, repl in _SIMPLE_LATEX:
        s = re.sub(pattern, repl, s)
    s = re.sub(r"\\sqrt\s*\[([^\]]+)\]\s*\{", r"\\nthroot{\1}{", s)
    s = _replace_command_args(s, "nthroot", 2, "(({1})**(1/({0})))")
    s = _replace_command_args(s, "frac", 2, "(({0})/({1}))")
    s = _replace_command_args(s, "sqrt", 1, "sqrt({0})")
    s = s.replace("{", "(").replace("}", ")")
    return re.sub(r"\s+", " ", s).strip()


def _clean_plain(s: str) -> tuple[str, bool]:
    """Thousands separators, trailing punctuation, percent and ``lhs =`` prefixes."""
    s = s.strip().rstrip(".;!?").strip()
    if "=" in s:
        s = s.rsplit("=", 1)[1].strip()
    s = s.replace("≈", "")
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)
    s = re.sub(r"(?<![\d.])0+(?=\d)", "", s)
    percent = s.endswith("%")
    s = s.rstrip("%").strip()
    m = _MIXED.match(s)
    if m:
        sign = "-" if m.group(1).startswith("-") else "+"
        s = f"({m.group(1)} {sign} {m.group(2)}/{m.group(3)})"
    return s, percent


def safe_parse(s: str, *, max_chars: int = 160, max_exponent: int = 400) -> sympy.Basic | None:
    """Parse plain syntax with sympy under a whitelist; None when it is not a clean expression."""
    if not s or len(s) > max_chars or not _ALLOWED_CHARS.match(s) or "__" in s:
        return None
    if re.search(r"\.(?!\d)|[A-Za-z_)]\s*\.", s):  # dots only inside numbers: no attribute access
        return None
    if _PLAIN_NUMBER.fullmatch(s):  # fast path: most answers are plain numbers
        return sympy.Rational(s)
    if any(tok not in _FUNCS and len(tok) != 1 for tok in _IDENT.findall(s)):
        return None
    if s.count("^") + s.count("**") > 3:
        return None
    try:
        expr = parse_expr(s, local_dict={**_LETTERS, **_FUNCS}, global_dict=dict(_GLOBALS),
                          transformations=_TRANSFORMS, evaluate=False)
    except (SyntaxError, TypeError, ValueError, AttributeError, ZeroDivisionError,
            NameError, OverflowError, RecursionError, sympy.SympifyError, TokenError):
        return None
    if isinstance(expr, tuple):
        expr = sympy.Tuple(*expr)
    if not isinstance(expr, sympy.Basic) or not _powers_bounded(expr, max_exponent):
        return None
    return expr


def _powers_bounded(expr: sympy.Basic, max_exponent: int) -> bool:
    """Reject power towers and huge literal exponents before anything is evaluated (post-order walk)."""
    for arg in expr.args:
        if not _powers_bounded(arg, max_exponent):
            return False
    if isinstance(expr, sympy.Pow) and not expr.exp.free_symbols:
        try:
            exponent = complex(sympy.N(expr.exp, 15))
        except (TypeError, ValueError, OverflowError):
            return False
        return abs(exponent) <= max_exponent
    return True


def parse_span(span: str, *, max_chars: int = 160, max_exponent: int = 400) -> MathValue | None:
    """Parse one candidate span (LaTeX allowed) as a whole; None when it does not parse."""
    plain, percent = _clean_plain(latex_to_plain(span))
    expr = safe_parse(plain, max_chars=max_chars, max_exponent=max_exponent)
    return MathValue(expr, percent, span) if expr is not None else None


def last_number(text: str, *, first: bool = False) -> MathValue | None:
    """The last (or first) number written in ``text`` ("1,000", "-3.5", "2e-3", "3/4", "50%")."""
    plain = latex_to_plain(text)
    matches = list(_NUMBER.finditer(plain))
    if not matches:
        return None
    m = matches[0] if first else matches[-1]
    sign, whole, frac, exp, denom = m.groups()
    if len(m.group(0)) > 100:  # size bound (and Python's int-from-str digit limit)
        return None
    value: sympy.Basic = sympy.Rational(whole.replace(",", "") + (frac or ""))
    if exp:
        if abs(int(exp)) > 400:
            return None
        value = value * sympy.Integer(10) ** int(exp)
    if denom:
        if int(denom) == 0:
            return None
        value = value / sympy.Integer(denom)
    if sign:
        value = -value
    percent = plain[m.end():].lstrip().startswith("%")
    return MathValue(value, percent, m.group(0))


@functools.lru_cache(maxsize=8192)
def extract_value(text: str, *, max_chars: int = 160, max_exponent: int = 400) -> MathValue | None:
    """The final answer of ``text`` as a :class:`MathValue`, or None when nothing numeric is found.

    Order: last ``\boxed{}`` (parsed whole, else its last number); the span after the last
    "answer is"/"answer:" (parsed whole, else its FIRST number: "The answer is 17 because 10+7");
    the whole text (parsed whole, else its LAST number).
    """
    boxed = last_boxed(text)
    if boxed is not None:
        return parse_span(boxed, max_chars=max_chars, max_exponent=max_exponent) or last_number(boxed)
    marker = list(_MARKER.finditer(text))
    if marker:
        span = marker[-1].group(1)
        got = parse_span(span, max_chars=max_chars, max_exponent=max_exponent)
        return got or last_number(span, first=True) or last_number(text)
    return parse_span(text, max_chars=max_chars, max_exponent=max_exponent) or last_number(text)


@functools.lru_cache(maxsize=8192)
def is_math_truth(text: str) -> bool:
    """True when a ground truth is mathematical: it parses whole, or is a number plus one word ('12 cm')."""
    if parse_span(last_boxed(text) or text) is not None:
        return True
    plain = latex_to_plain(text)
    return re.fullmatch(r"\s*-?[\d.,/]*\d\s*%?\s*[A-Za-z]*\.?\s*", plain) is not None
