"""The ``python`` tool: LLM-written Python run in the jailed, limited process of :mod:`streamgrpo.sandbox.runner`
(never in the worker's process; what the jail enforces and what it does not cover is said there and in
:mod:`streamgrpo.sandbox.jail`).

The tool adds what the agent sees: a trailing expression is printed as the REPL would, a program over
:data:`MAX_CODE_CHARS` or empty is refused before it runs, and stdout/stderr are joined into one answer.
"""

from __future__ import annotations

import ast
from typing import Any

from streamgrpo.rollout.tools.base import Param, Tool, ToolExample, ToolResult, ToolSpec
from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.runner import SandboxRun, prepare_jail, run_sandboxed

MAX_CODE_CHARS = 20_000


def echo_last_expression(code: str) -> str:
    """Print the value of a trailing expression, as the Python REPL does (``778*74`` shows ``57572``).

    Planners often send a bare expression; without this the tool answers ``(no output)`` and the turn is
    wasted. The source is only parsed here (``ast`` never runs it; the sandbox does). A program that does not
    parse, or whose last statement is not an expression, is returned unchanged (its error, if any, comes
    from the sandbox, as before).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    if isinstance(last.value, ast.Call) and isinstance(last.value.func, ast.Name) and last.value.func.id == "print":
        return code
    lines = code.splitlines()
    head = "\n".join(lines[: last.lineno - 1] + [lines[last.lineno - 1][: last.col_offset]])
    expr = ast.get_source_segment(code, last.value) or ""
    if not expr:
        return code
    return f"{head}__value__ = ({expr})\nif __value__ is not None:\n    print(__value__)\n"


def format_run(run: SandboxRun) -> str:
    """What the agent reads: stdout, then stderr under a marker when there is any."""
    text = run.stdout
    if run.stderr.strip():
        text = (text + ("\n" if text and not text.endswith("\n") else "")) + "[stderr]\n" + run.stderr
    return text


class PythonSandbox(Tool):
    """``{"code": "print(2+2)"}`` -> ``"4"``: runs the code in a fresh jailed process."""

    def __init__(self, limits: SandboxSettings | None = None, *, max_output_chars: int = 2000) -> None:
        super().__init__(max_output_chars=max_output_chars)
        self.limits = limits or SandboxSettings()
        self.plan = prepare_jail(self.limits)
        self.spec = ToolSpec(
            name="python",
            description="Runs a short Python 3 program in a fresh isolated process and returns what it prints "
            "(stdout, then stderr). Use print() to see results. The standard library (math, fractions, itertools, "
            "statistics...) and installed packages such as sympy can be imported.",
            params=(Param("code", "string", "A complete Python program; print the values you need."),),
            limits=f"{self.limits.cpu_seconds}s CPU, {self.limits.wall_seconds:g}s wall, {self.limits.memory_mb} MiB "
            f"memory, {self.limits.disk_mb} MiB of files; no network, files only in its own temporary directory.",
            examples=(ToolExample({"code": "print(sum(i * i for i in range(1, 11)))"}, "385"),),
        )

    def _call(self, args: dict[str, Any]) -> ToolResult:
        code = args["code"]
        if not code.strip():
            return ToolResult(output="", error="empty program; send Python code that prints its result")
        if len(code) > MAX_CODE_CHARS:
            return ToolResult(output="", error=f"program longer than {MAX_CODE_CHARS} characters")
        try:
            run = run_sandboxed(echo_last_expression(code), self.limits, self.plan)
        except OSError as exc:  # the host could not start bwrap (fork limit, out of memory, ...)
            return ToolResult(output="", error=f"the sandbox could not start: {exc}; retry later")
        error = run.error(self.limits)
        if error is None and not run.stdout.strip() and not run.stderr.strip():
            return ToolResult(output="(no output; use print() to show results)")
        return ToolResult(output=format_run(run), error=error,
                          truncated=run.stdout_truncated or run.stderr_truncated)
