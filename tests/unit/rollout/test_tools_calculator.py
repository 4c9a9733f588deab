from __future__ import annotations

import math

import pytest

from streamgrpo.rollout.tools.calculator import Calculator, evaluate, format_number


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
def test_evaluates(expr: str, expected: str) -> None:
    result = Calculator().run({"expression": expr})
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
def test_refuses_with_a_clear_error(expr: str, fragment: str) -> None:
    result = Calculator().run({"expression": expr})
    assert result.error is not None, result.output
    assert fragment in result.error


def test_parentheses_do_not_count_as_depth() -> None:
    assert Calculator().run({"expression": "(" * 30 + "1" + ")" * 30}).output == "1"


def test_bad_arguments_never_raise() -> None:
    calc = Calculator()
    assert "missing required argument 'expression'" in (calc.run({}).error or "")
    assert "unknown argument" in (calc.run({"expression": "1", "x": 2}).error or "")
    assert calc.run({"expression": 12}).output == "12"  # a number is accepted as its text


def test_format_number() -> None:
    assert format_number(3) == "3"
    assert format_number(3.0) == "3"
    assert format_number(1e20) == "1e+20"
    assert format_number(math.inf) == "inf"
    assert evaluate("2*3") == 6
