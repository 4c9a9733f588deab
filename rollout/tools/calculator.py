"""Safe arithmetic: parse with :mod:`ast`, walk a whitelist of nodes, never ``eval``.

Covered: int/float literals, ``+ - * / // % **``, unary ``+ -``, parentheses, the constants
``pi e tau`` and the functions in :data:`FUNCTIONS` (sqrt, log, log10, log2, exp, sin, cos, tan,
asin, acos, atan, abs, round, floor, ceil, factorial, min, max, hypot). ``^`` is read as power
(what people and small models mean), and ``,`` thousands separators are NOT accepted (they would be
ambiguous with function arguments).

Bounds, two layers:

- sizes: CPU/memory bombs are refused (or computed exactly a cheaper way) before they run: an
  expression longer than :data:`MAX_EXPR_CHARS` or nested (brackets, calls, powers) deeper than
  :data:`MAX_DEPTH` (a chain ``1 + 2 + ... + 99`` is a loop, not nesting), a power whose
  result would have more than :data:`MAX_RESULT_DIGITS` digits (``9**9**9``), a product of integers
  that would, a factorial above :data:`MAX_FACTORIAL`; ``round(x, n)`` with ``n`` far below ``x``'s
  digit count is computed with the smallest ``n`` that gives the same result (``round(1, -10**18)``
  is 0 without computing ``10**(10**18)``);
- wall clock and memory: :class:`Calculator` evaluates in a helper process
  (:class:`~streamgrpo.rollout.tools.bounded.BoundedCall`) killed after ``wall_seconds``
  (default :data:`WALL_SECONDS`), with an address-space limit of ``memory_mb``, so an operation these
  rules missed ends the call with an error instead of hanging the worker.

A float result that is not finite (``1e308 * 10``, ``inf - inf``) is an error, at every step.

Not covered: variables, assignment, comparisons, complex numbers, symbolic maths (use the python
tool with sympy for those).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from streamgrpo.rollout.tools.base import Param, Tool, ToolExample, ToolSpec
from streamgrpo.rollout.tools.bounded import BoundedCall
from streamgrpo.rollout.tools.errors import ToolInputError

MAX_EXPR_CHARS = 500
MAX_DEPTH = 40
MAX_RESULT_DIGITS = 1000
MAX_FACTORIAL = 400
WALL_SECONDS = 2.0
MEMORY_MB = 512
_LOG10_2 = math.log10(2)

Number = int | float

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _factorial(n: Number) -> int:
    if isinstance(n, float) and not n.is_integer() or n < 0:
        raise ToolInputError(f"factorial needs a non-negative integer, got {n}")
    if n > MAX_FACTORIAL:
        raise ToolInputError(f"factorial({n}) is too large (limit {MAX_FACTORIAL})")
    return math.factorial(int(n))


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if isinstance(ndigits, float) and not ndigits.is_integer():
        raise ToolInputError(f"round needs an integer number of digits, got {ndigits}")
    # int.__round__(n) computes 10**-n: for n below -(digits of x + 1) the result is 0 either way.
    n = max(int(ndigits), -int(_digits(x)) - 2)
    return round(x, min(n, 400))  # above ~325 digits a float (and any int) is unchanged


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt, "log": math.log, "log10": math.log10, "log2": math.log2, "exp": math.exp,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos,
    "atan": math.atan, "abs": abs, "round": _round, "floor": math.floor, "ceil": math.ceil,
    "factorial": _factorial, "min": min, "max": max, "hypot": math.hypot,
}

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Number]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
}


def _digits(x: Number) -> float:
    """Approximate number of decimal digits of |x| (0 for |x| <= 1)."""
    if isinstance(x, int):
        return x.bit_length() * _LOG10_2
    return math.log10(abs(x)) if abs(x) > 1 else 0.0


def _power(base: Number, exp: Number) -> Number:
    if abs(base) > 1 and exp > 0 and exp * _digits(base) > MAX_RESULT_DIGITS:
        raise ToolInputError(f"{base}**{exp} is too large (more than {MAX_RESULT_DIGITS} digits)")
    if base == 0 and exp < 0:
        raise ToolInputError("0 cannot be raised to a negative power")
    result = base**exp
    if isinstance(result, complex):
        raise ToolInputError(f"{base}**{exp} is not a real number")
    return result


def _binop(op: ast.operator, a: Number, b: Number) -> Number:
    if isinstance(op, ast.Pow):
        return _power(a, b)
    if isinstance(op, ast.Mult) and _digits(a) + _digits(b) > MAX_RESULT_DIGITS:
        raise ToolInputError(f"the product has more than {MAX_RESULT_DIGITS} digits")
    fn = _BINOPS.get(type(op))
    if fn is None:
        raise ToolInputError(f"operator {type(op).__name__} is not supported; use + - * / // % ** ^")
    return fn(a, b)


def _finite(x: Number) -> Number:
    """A float result must be a number: inf and nan are errors, never answers."""
    if isinstance(x, float) and not math.isfinite(x):
        raise ToolInputError(f"the result is {x}: it overflows a float (use integers for exact large numbers)")
    return x


def _chain(node: ast.BinOp, depth: int) -> Number:
    """A left-associative chain (``1 + 2 + ... + 41``) evaluated as a loop: its length is not nesting depth."""
    spine: list[ast.BinOp] = []
    left: ast.AST = node
    while isinstance(left, ast.BinOp) and not isinstance(left.op, ast.Pow):
        spine.append(left)
        left = left.left
    value = _eval(left, depth + 1)
    for op in reversed(spine):
        value = _finite(_binop(op.op, value, _eval(op.right, depth + 1)))
    return value


def _eval(node: ast.AST, depth: int = 0) -> Number:
    if depth > MAX_DEPTH:
        raise ToolInputError(f"expression is nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, ast.Expression):
        return _eval(node.body, depth + 1)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _finite(node.value)  # "1e999" parses as inf
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise ToolInputError(f"unknown name {node.id!r}; constants are {sorted(CONSTANTS)}")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _finite(_binop(node.op, _eval(node.left, depth + 1), _eval(node.right, depth + 1)))
    if isinstance(node, ast.BinOp):
        return _chain(node, depth)
    if isinstance(node, ast.Call):
        return _call(node, depth)
    raise ToolInputError(f"{type(node).__name__} is not allowed; only numbers, operators and functions")


def _call(node: ast.Call, depth: int) -> Number:
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
        name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        raise ToolInputError(f"unknown function {name!r}; available: {', '.join(sorted(FUNCTIONS))}")
    if node.keywords:
        raise ToolInputError("keyword arguments are not supported")
    args = [_eval(a, depth + 1) for a in node.args]
    try:
        return _finite(FUNCTIONS[node.func.id](*args))
    except TypeError as exc:
        raise ToolInputError(f"{node.func.id}: {exc}") from exc


def format_number(x: Number) -> str:
    """Integers as is; floats with 12 significant digits, integral floats without ``.0``."""
    if isinstance(x, int):
        return str(x)
    if math.isfinite(x) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.12g}"


def evaluate(expression: str) -> Number:
    """Evaluate ``expression`` safely; raises ToolInputError with the reason."""
    text = expression.strip().replace("^", "**")
    if not text:
        raise ToolInputError("empty expression")
    if len(text) > MAX_EXPR_CHARS:
        raise ToolInputError(f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ToolInputError(f"not a valid arithmetic expression: {exc}") from exc
    try:
        return _eval(tree)
    except ZeroDivisionError as exc:
        raise ToolInputError("division by zero") from exc
    except (ValueError, OverflowError) as exc:
        raise ToolInputError(f"math error: {exc}") from exc


def calculate(expression: str) -> str:
    """The calculator's answer as text (what the helper process runs)."""
    return format_number(evaluate(expression))


class Calculator(Tool):
    """Arithmetic tool: ``{"expression": "347 * 29"}`` -> ``"10063"``, evaluated in a helper process
    with a wall-clock and memory bound (see the module docstring)."""

    spec = ToolSpec(
        name="calculator",
        description="Evaluates one arithmetic expression exactly (integers are exact, floats have 12 "
        "significant digits). Functions: " + ", ".join(sorted(FUNCTIONS)) + "; constants pi, e, tau.",
        params=(Param("expression", "string", "The arithmetic expression, e.g. '12**2' or 'sqrt(2)*3'."),),
        limits=f"at most {MAX_EXPR_CHARS} characters; results up to {MAX_RESULT_DIGITS} digits; no variables.",
        examples=(
            ToolExample({"expression": "347 * 29"}, "10063"),
            ToolExample({"expression": "sqrt(144) + 2^10"}, "1036"),
        ),
    )

    def __init__(self, *, max_output_chars: int = 2000, wall_seconds: float = WALL_SECONDS,
                 memory_mb: int = MEMORY_MB) -> None:
        super().__init__(max_output_chars=max_output_chars)
        self.bounded = BoundedCall(f"{__name__}:calculate", wall_seconds=wall_seconds, memory_mb=memory_mb)

    def _call(self, args: dict[str, Any]) -> str:
        expression = args["expression"]
        if len(expression.strip()) > MAX_EXPR_CHARS:  # refused without a round trip
            raise ToolInputError(f"expression longer than {MAX_EXPR_CHARS} characters")
        return self.bounded(expression)
