"""Demonstrations: a task plus the planner's replies that solve it, read from a file or written by a scripted expert.

A demonstration is a :class:`DemoRow`: a :class:`~streamgrpo.tasks.datasets.TaskRow` (question, ground truths,
source, metadata) and ``steps``, the planner's replies in order, each ONE JSON object as the planner writes it:
``{"tool": NAME, "input": TEXT}`` for a tool call and ``{"answer": TEXT}`` for the answer, which is the last step.
``streamgrpo submit --demos FILE`` publishes them as Tasks whose ``demonstration`` field carries the steps; a
rollout worker executes them through the real executor and tools, the judge scores the answer, and what fails
any of that is dead-lettered (``demonstration_failed`` / ``demonstration_wrong``), so a broken demonstration never
trains.

File format (JSONL, one demonstration per line; the task columns are those of a ``generic`` task file)::

    {"question": "What is 6 times 7?", "answer": "42",
     "steps": [{"tool": "calculator", "input": "6*7"}, {"answer": "42"}]}

:func:`expert_demos` is the scripted expert of the built-in TRAINING split: from each training task's own facts it
writes which tool to call, with which input (the expression, or a search query naming the question's entity), and
the answer. It never reads the held-out split (``tests/unit/tasks/test_demos.py`` checks that no held-out entity,
number or phrasing appears in any of its steps).

This module is part of the light producer SDK: standard library only. What is not covered: executing a
demonstration (the rollout loop does), multi-line or non-JSON planner formats.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgrpo.tasks import builtin
from streamgrpo.tasks.datasets import RowError, TaskRow, from_generic, iter_records

#: ``Demonstration.source`` of the built-in expert's demonstrations.
EXPERT_SOURCE = "builtin-expert"
#: Most steps one demonstration may give (a rollout's ``max_turns`` must be at least its step count).
MAX_STEPS = 8


@dataclass(frozen=True)
class DemoRow:
    """One demonstration: the task it solves and the planner's replies, as JSON texts (see :func:`step_text`)."""

    task: TaskRow
    steps: tuple[str, ...]
    demo_source: str  #: where it comes from (``Demonstration.source``): builtin-expert, file:NAME, ...

    # the task-row view the SDK publishes (``streamgrpo.topics.sdk.encode_row``): a Task with its demonstration
    @property
    def question(self) -> str:
        return self.task.question

    @property
    def ground_truths(self) -> list[str]:
        return self.task.ground_truths

    @property
    def metadata(self) -> dict[str, str]:
        return self.task.metadata

    @property
    def group_size(self) -> int | None:
        return self.task.group_size

    @property
    def demo_steps(self) -> tuple[str, ...]:
        return self.steps

    @property
    def source(self) -> str:
        return self.task.source


def step_text(step: Mapping[str, Any]) -> str:
    """The planner's reply for one step, exactly as the planner writes it (``{"tool": .., "input": ..}`` or
    ``{"answer": ..}``); ValueError for anything else."""
    keys = set(step)
    if keys == {"answer"}:
        return json.dumps({"answer": _text(step["answer"], "answer")}, ensure_ascii=False)
    if keys == {"tool", "input"}:
        tool, inp = _text(step["tool"], "tool"), _text(step["input"], "input")
        if not tool:
            raise ValueError("a tool step needs a non-empty 'tool'")
        return json.dumps({"tool": tool, "input": inp}, ensure_ascii=False)
    raise ValueError(f"a step is {{\"tool\": ..., \"input\": ...}} or {{\"answer\": ...}}, not keys {sorted(keys)}")


def _text(value: Any, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"step field {name!r} must be text or a number, not {type(value).__name__}")
    return str(value)


def check_steps(steps: Sequence[str]) -> None:
    """ValueError unless ``steps`` is 1..:data:`MAX_STEPS` planner replies, tool calls then one final answer."""
    if not 1 <= len(steps) <= MAX_STEPS:
        raise ValueError(f"a demonstration has 1..{MAX_STEPS} steps (got {len(steps)})")
    parsed = []
    for i, text in enumerate(steps, 1):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"step {i} is not one JSON object: {exc}") from exc
        if not isinstance(obj, dict):
            raise ValueError(f"step {i} is not one JSON object")
        step_text(obj)
        parsed.append(obj)
    if "answer" not in parsed[-1] or any("answer" in obj for obj in parsed[:-1]):
        raise ValueError("a demonstration ends with its one answer step ({\"answer\": ...}); tool calls come before it")


def from_record(n: int, rec: Mapping[str, Any], source: str) -> DemoRow:
    """Row ``n`` of a demonstration file -> :class:`DemoRow`; :class:`RowError` naming the field otherwise."""
    task = from_generic(n, rec)
    if not task.ground_truths:
        raise RowError(n, "answer", "a demonstration needs its ground truth ('answer' or 'ground_truths'): the judge "
                                    "checks the demonstrated answer against it")
    raw = rec.get("steps")
    if not isinstance(raw, list):
        raise RowError(n, "steps", "expected a list of steps, e.g. [{\"tool\": \"calculator\", \"input\": \"6*7\"}, "
                                   "{\"answer\": \"42\"}]")
    try:
        steps = tuple(step_text(s) if isinstance(s, Mapping) else _bad_step(s) for s in raw)
        check_steps(steps)
    except ValueError as exc:
        raise RowError(n, "steps", str(exc)) from exc
    return DemoRow(task, steps, str(rec.get("demo_source") or source))


def _bad_step(step: Any) -> str:
    raise ValueError(f"each step is a JSON object, not {type(step).__name__}")


def iter_demos(path: str | Path) -> Iterator[tuple[int, DemoRow | RowError]]:
    """``(row number, DemoRow | RowError)`` for each line of a JSONL/JSON demonstration file (bad rows don't stop it)."""
    source = f"file:{Path(path).name}"
    for n, rec in iter_records(path):
        if isinstance(rec, RowError):
            yield n, rec
            continue
        try:
            yield n, from_record(n, rec, source)
        except RowError as exc:
            yield n, exc


# -- the scripted expert of the built-in training split -------------------------------------------------------

#: The calculator input of each of ``builtin.ARITHMETIC_TEMPLATES``' operations, from its operands.
ARITHMETIC_EXPRESSIONS: tuple[Callable[[int, int, int], str], ...] = (
    lambda a, b, c: f"{a}*{b}",
    lambda a, b, c: f"{a * 37 + b}+{c * 113}",
    lambda a, b, c: f"{a}*{b}-{c}",
    lambda a, b, c: f"{b}**2+{c}",
    lambda a, b, c: f"({a}+{c})*({b}-7)",
    lambda a, b, c: f"{a * b * 10 + c}//{b}",
)

_COMPUTE = re.compile(r"^(?:Compute|Calculate) (\d+)(?: squared| ([*+]) (\d+))\b")
_LOOKUP_QUERIES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"in which year was the Kingdom of (\w+) founded"), "founding of the Kingdom of {0}"),
    (re.compile(r"what is the capital of the Kingdom of (\w+)"), "capital of the Kingdom of {0}"),
    (re.compile(r"who founded the Kingdom of (\w+)"), "founder of the Kingdom of {0}"),
    (re.compile(r"who invented the ([\w ]+)\?"), "inventor of the {0}"),
    (re.compile(r"in which town was ([\w ]+) born"), "{0} born"),
)


def _computed(question: str) -> tuple[str, int]:
    """The calculator input and value of a question that starts with ``Compute ...``."""
    m = _COMPUTE.match(question)
    if m is None:
        raise ValueError(f"no 'Compute ...' sentence in {question!r}")
    a = int(m.group(1))
    if m.group(2) is None:
        return f"{a}**2", a * a
    b = int(m.group(3))
    return f"{a}{m.group(2)}{b}", a * b if m.group(2) == "*" else a + b


def _tool(name: str, inp: str) -> dict[str, str]:
    return {"tool": name, "input": inp}


def expert_steps(row: TaskRow) -> list[dict[str, str]]:
    """The expert's steps for one built-in task (ValueError for a task it has no recipe for)."""
    kind, truth, q = row.metadata.get("kind"), row.ground_truths[0], row.question
    answer = {"answer": truth}
    if kind == "arithmetic":
        i = int(row.metadata["row_id"].rsplit("-", 1)[1])
        expr = ARITHMETIC_EXPRESSIONS[i % len(ARITHMETIC_EXPRESSIONS)](*builtin.arithmetic_operands(i))
        return [_tool("calculator", expr), answer]
    if kind == "lookup":
        for pattern, query in _LOOKUP_QUERIES:
            if m := pattern.search(q):
                return [_tool("knowledge_search", query.format(m.group(1))), answer]
        raise ValueError(f"no lookup recipe for {q!r}")
    if kind == "history":
        expr, year = _computed(q)
        return [_tool("calculator", expr), _tool("knowledge_search", f"events of the year {year} AD"), answer]
    if kind == "two_step":
        if m := re.search(r"population of (\w+), .* add (\d+) to it", q):
            population = int(truth) - int(m.group(2))
            return [_tool("knowledge_search", f"population of {m.group(1)}"),
                    _tool("calculator", f"{population}+{m.group(2)}"), answer]
        expr, year = _computed(q)
        what = "kingdom founded" if "kingdom" in q else "inventor born"
        return [_tool("calculator", expr), _tool("knowledge_search", f"{what} in the year {year}"), answer]
    raise ValueError(f"no expert recipe for task kind {kind!r}")


def expert_demos(rows: Sequence[TaskRow] | None = None) -> list[DemoRow]:
    """The expert's demonstrations of ``rows`` (default: the built-in training split), in the rows' order."""
    rows = builtin.train_tasks() if rows is None else rows
    out = []
    for row in rows:
        steps = tuple(step_text(s) for s in expert_steps(row))
        check_steps(steps)
        out.append(DemoRow(row, steps, EXPERT_SOURCE))
    return out
