from __future__ import annotations

import math
import os
from collections.abc import Iterator

import pytest

from streamgrpo.rollout.tools.calculator import Calculator, evaluate, format_number


@pytest.fixture(scope="module")
def calc() -> Iterator[Calculator]:
    """One calculator (one helper process) for the module, as a worker has."""
    tool = Calculator(wall_seconds=5)
    yield tool
    tool.bounded.close()


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("347 * 29", "10063"),
        ("12**2", "144"),
        ("12^2", "144"),
        ("(3 + 4) * -2", "-14"),
        ("17 // 5 + 17 % 5", "5"),
        ("10 / 4", "2.5"),
        ("10 / 2", "5"),
        ("sqrt(144) + 2^10", "1036"),
        ("round(pi, 4)", "3.1416"),
        ("log(e)", "1"),
        ("log(8, 2)", "3"),
        ("abs(-7) + max(1, 9, 3) + factorial(5)", "136"),
        ("2**100", str(2**100)),
        ("1/3", "0.333333333333"),
    ],
)
def test_evaluates(expr: str, expected: str, calc: Calculator) -> None:
    result = calc.run({"expression": expr})
    assert result.error is None
    assert result.output == expected


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("9**9**9", "too large"),
        ("10**10000", "too large"),
        ("(10**600) * (10**600)", "more than 1000 digits"),
        ("factorial(100000)", "too large"),
        ("1/0", "division by zero"),
        ("sqrt(-1)", "math error"),
        ("__import__('os').system('ls')", "unknown function"),
        ("().__class__", "not allowed"),
        ("x + 1", "unknown name"),
        ("[1, 2]", "not allowed"),
        ("lambda: 1", "not allowed"),
        ("1 +", "not a valid arithmetic expression"),
        ("", "empty expression"),
        ("1" + "+1" * 400, "longer than"),
        ("-" * 200 + "1", "nested deeper"),
        ("2 << 3", "not supported"),
        ("True + 1", "not allowed"),
    ],
)
def test_refuses_with_a_clear_error(expr: str, fragment: str, calc: Calculator) -> None:
    result = calc.run({"expression": expr})
    assert result.error is not None, result.output
    assert fragment in result.error


def test_parentheses_do_not_count_as_depth(calc: Calculator) -> None:
    assert calc.run({"expression": "(" * 30 + "1" + ")" * 30}).output == "1"


def test_bad_arguments_never_raise(calc: Calculator) -> None:
    assert "missing required argument 'expression'" in (calc.run({}).error or "")
    assert "unknown argument" in (calc.run({"expression": "1", "x": 2}).error or "")
    assert calc.run({"expression": 12}).output == "12"  # a number is accepted as its text


def test_format_number() -> None:
    assert format_number(3) == "3"
    assert format_number(3.0) == "3"
    assert format_number(1e20) == "1e+20"
    assert format_number(math.inf) == "inf"
    assert evaluate("2*3") == 6


# Bombs: each must come back with an answer or a clear error; the helper's wall clock is the backstop
# (a hang would end the call with "timed out" instead of an answer).
@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("round(1, -10**18)", "0"),
        ("round(1, -10**7)", "0"),
        ("round(-7, -5)", "0"),
        ("round(123456, -3)", "123000"),
        ("round(10**500 + 7, -499)", str(10**500)),
        ("round(2.5, 10**18)", "2.5"),
        ("round(1e308, -10**18)", "0"),
        ("round(7, 10**18)", "7"),
    ],
)
def test_round_with_huge_ndigits_is_exact_and_immediate(expr: str, expected: str, calc: Calculator) -> None:
    result = calc.run({"expression": expr})
    assert result.error is None, result.error
    assert result.output == expected


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("round(1.5, 0.5)", "integer number of digits"),
        ("9**9**9**9", "too large"),
        ("(-3)**(10**18)", "too large"),
        ("1.0000001**(10**18)", "too large"),
        ("factorial(factorial(20))", "too large"),
        ("10**999 * 10**999 * 10**999", "more than 1000 digits"),
        ("exp(10**400)", "math error"),
        ("(10**400) / 0.5", "math error"),
        ("(10**400) % 0.5", "math error"),
        ("max(" + ",".join(["10**400"] * 80) + ")", "longer than"),
    ],
)
def test_bombs_are_refused_with_a_clear_error(expr: str, fragment: str, calc: Calculator) -> None:
    result = calc.run({"expression": expr})
    assert result.error is not None, result.output
    assert fragment in result.error
    assert "timed out" not in result.error


def test_the_calculator_runs_in_a_killable_helper_process() -> None:
    calc = Calculator()
    assert calc.run({"expression": "6*7"}).output == "42"
    proc = calc.bounded._proc
    assert proc is not None and proc.pid != os.getpid() and proc.poll() is None
    calc.bounded.close()
    assert proc.poll() is not None
    assert calc.run({"expression": "6*7"}).output == "42"  # a fresh helper
    calc.bounded.close()


@pytest.mark.parametrize(
    "expr", ["1e308 * 10", "1e308 * 10 - 1e308 * 10", "1e999", "min(1e308 * 10, 3)", "-1e308 * 10", "1e200 * 1e200 * 0"])
def test_inf_and_nan_are_errors_never_results(expr: str, calc: Calculator) -> None:
    # issue 24, finding 12: these answered "inf" / "nan"
    result = calc.run({"expression": expr})
    assert not result.ok and "overflows a float" in (result.error or ""), result
    assert "inf" not in result.output and "nan" not in result.output


@pytest.mark.parametrize("terms", [41, 100, 240])
def test_a_long_sum_is_not_nesting(terms: int, calc: Calculator) -> None:
    # issue 24, finding 12: a 41-term sum was refused as "nested deeper than 40"
    assert calc.run({"expression": "+".join(["1"] * terms)}).output == str(terms)
    assert calc.run({"expression": "-".join(["2"] * terms)}).output == str(2 - 2 * (terms - 1))
