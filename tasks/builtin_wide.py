"""``builtin:train-wide``: the training split plus a wider arithmetic pool (fresh numbers, freer wordings).

The training split (:func:`~streamgrpo.tasks.builtin.train_tasks`) has 80 arithmetic tasks. A 30-minute run
solves each of them always or never after a few adapter versions, the curriculum parks them and the arithmetic
kind turns cold. :func:`train_wide_tasks` is that split unchanged plus :data:`N_WIDE_ARITHMETIC` extra arithmetic
tasks: the same six operations (:data:`~streamgrpo.tasks.builtin.ARITHMETIC_TEMPLATES`, answers computed by
them), operands from their own hash stream (``"arw"``), asked in symbols, in the two training wordings
(:data:`~streamgrpo.tasks.builtin.ARITHMETIC_WORDINGS`) or in four more per operation (:data:`WIDE_WORDINGS`:
other sentence frames, numbers in context such as money, distances and batches), one phrasing after the other.

The split rule, from the training side (the held-out split is generated from the ORIGINAL training split and
does not read anything here, so it stays byte-identical; ``tests/unit/tasks/test_builtin_split.py``):

- NUMBERS: an extra task writes no integer (question or answer) that any held-out task writes, and none the
  archive (:func:`~streamgrpo.tasks.builtin.builtin_corpus`) holds, so no extra task names a held-out year or
  has an archive key as its answer; a candidate that would is skipped;
- PHRASINGS: no wording of :data:`WIDE_WORDINGS` shares a sentence frame (numbers replaced by ``#``) or its
  first two words with a held-out phrasing, and each writes exactly the numbers of its operation's template.

Order: the kinds are interleaved one of each in turn, as in ``train_tasks()``; within the arithmetic kind the 80
training tasks and the extra tasks are spread evenly (one training task, then four extra ones), so a run that
reaches only the start of the set already meets fresh arithmetic. Once the other kinds are used up, the rest of
the set is arithmetic only. ``builtin`` (every task) does not include the extra tasks.

Standard library only, like :mod:`.builtin`. What is not covered: operations beyond the six, numbers outside
the training split's operand ranges, whether the extra tasks sit near a 0.5 pass rate for a given model. Measured
once (``bench/bench_learning.py 1800 --seeds 0 --tasks builtin:train-wide``, docs/learning.md): SmolLM2's planner
solved the extra tasks less often than the training split's (0.44 against 0.56 of rollouts, then 0.06 against
0.63 under the last version), the arithmetic kind turned cold, and the run learned less than on ``builtin:train``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

from streamgrpo.tasks.builtin import (
    ARITHMETIC_TEMPLATES,
    ARITHMETIC_WORDINGS,
    _copies,
    _h,
    _interleave,
    _numbers,
    _row,
    builtin_corpus,
    heldout_tasks,
    train_tasks,
)
from streamgrpo.tasks.datasets import TaskRow

N_WIDE_ARITHMETIC = 320

#: Four more wordings of each operation, for the extra tasks only: ``WIDE_WORDINGS[k]`` asks for the number
#: ``ARITHMETIC_TEMPLATES[k]`` asks for and writes exactly its numbers (``b`` twice in one of them).
WIDE_WORDINGS: tuple[tuple[Callable[[int, int, int], str], ...], ...] = (
    (lambda a, b, c: f"Each crate holds {b} jars. How many jars do {a} crates hold?",
     lambda a, b, c: f"A ticket costs {b} dollars. What is the price of {a} tickets, in dollars?",
     lambda a, b, c: f"A cyclist rides {b} km a day for {a} days. How many km is that in all?",
     lambda a, b, c: f"Over {a} weeks a bakery bakes {b} loaves per week. How many loaves does it bake?"),
    (lambda a, b, c: f"A library has {a * 37 + b} books and buys {c * 113} more. How many books does it have now?",
     lambda a, b, c: f"Your account holds {a * 37 + b} dollars and you deposit {c * 113} dollars. "
                     "What is the new balance?",
     lambda a, b, c: f"A road trip covers {a * 37 + b} km in the first week and {c * 113} km in the second. "
                     "How far is that altogether?",
     lambda a, b, c: f"Combine a batch of {a * 37 + b} screws with a batch of {c * 113} screws. "
                     "How many screws are there?"),
    (lambda a, b, c: f"A warehouse stocks {a} shelves with {b} cans each, then ships out {c} cans. "
                     "How many cans stay?",
     lambda a, b, c: f"You earn {b} dollars a day for {a} days and spend {c} dollars. How many dollars do you keep?",
     lambda a, b, c: f"A truck makes {a} trips of {b} km; {c} km of them are on gravel. "
                     "How many km are on paved road?",
     lambda a, b, c: f"From {a} batches of {b} bolts, {c} bolts fail inspection. How many bolts pass?"),
    (lambda a, b, c: f"A square plot measures {b} m by {b} m, and a strip of {c} square metres is added. "
                     "What is the total area in square metres?",
     lambda a, b, c: f"Square the number {b}, then add {c}. What do you get?",
     lambda a, b, c: f"A tray holds {b} rows of {b} cups, and {c} more cups sit beside it. How many cups are there?",
     lambda a, b, c: f"Starting from {c}, add the square of {b}. Which number do you reach?"),
    (lambda a, b, c: f"A club has {a} members and {c} guests; each of them pays {b} dollars minus a 7 dollar "
                     "discount. What is the total paid, in dollars?",
     lambda a, b, c: f"Put {a} boxes and {c} boxes together; every box carries {b} items, but 7 items are taken "
                     "out of each box. How many items remain?",
     lambda a, b, c: f"The sum of {a} and {c} is multiplied by 7 less than {b}. What is the result?",
     lambda a, b, c: f"A factory runs {a} day shifts and {c} night shifts; each shift makes {b} parts, 7 of which "
                     "are rejected. How many good parts are made?"),
    (lambda a, b, c: f"A farmer packs {a * b * 10 + c} eggs into cartons of {b}. How many full cartons does she fill?",
     lambda a, b, c: f"With {a * b * 10 + c} dollars, how many tickets at {b} dollars each can you buy?",
     lambda a, b, c: f"A road of {a * b * 10 + c} metres is cut into sections of {b} metres. "
                     "How many complete sections are there?",
     lambda a, b, c: f"Split {a * b * 10 + c} marbles into bags of {b}. How many bags are completely full?"),
)


def _phrasings(k: int) -> tuple[Callable[[int, int, int], str], ...]:
    """Operation ``k``'s phrasings for the extra tasks: symbols, the two training wordings, the four wide ones."""
    return (lambda a, b, c: ARITHMETIC_TEMPLATES[k][1](a, b, c)[0], *ARITHMETIC_WORDINGS[k], *WIDE_WORDINGS[k])


@lru_cache(maxsize=1)
def forbidden_numbers() -> frozenset[int]:
    """Every integer a held-out task writes (question or answer) and every integer the archive holds."""
    held = {n for r in heldout_tasks() for n in _numbers(r)}
    archive = {int(n) for p in builtin_corpus() for n in re.findall(r"\d+", p.text)}
    return frozenset(held | archive)


@lru_cache(maxsize=1)
def _wide_arithmetic() -> tuple[TaskRow, ...]:
    """The extra tasks: row ``j`` asks operation ``j % 6`` in phrasing ``(j // 6) % 7``; its operands come from
    candidate ``i`` of the ``"arw"`` stream (same ranges as the training split), the first candidate whose
    numbers are allowed and whose question is new."""
    forbidden = forbidden_numbers()
    seen = {r.question for r in train_tasks()}
    rows: list[TaskRow] = []
    i = 0
    while len(rows) < N_WIDE_ARITHMETIC:
        a, b, c = 101 + _h("arw", i, "a") % 899, 12 + _h("arw", i, "b") % 88, 10 + _h("arw", i, "c") % 990
        i += 1
        k = len(rows) % len(ARITHMETIC_TEMPLATES)
        difficulty, make = ARITHMETIC_TEMPLATES[k]
        phrasings = _phrasings(k)
        question = phrasings[(len(rows) // len(ARITHMETIC_TEMPLATES)) % len(phrasings)](a, b, c)
        row = _row("arithmetic", len(rows), question, [str(make(a, b, c)[1])], difficulty, split="train")
        if _numbers(row) & forbidden or question in seen:
            continue
        seen.add(question)
        rows.append(replace(row, metadata={**row.metadata, "row_id": f"builtin-wide-arithmetic-{len(rows):04d}"}))
    return tuple(rows)


def _spread(first: list[TaskRow], second: list[TaskRow]) -> list[TaskRow]:
    """``first`` and ``second`` merged evenly, each in its own order (row ``i`` of a list of ``n`` at ``i / n``)."""
    keyed = [(i / len(first), 0, r) for i, r in enumerate(first)] + [(i / len(second), 1, r)
                                                                    for i, r in enumerate(second)]
    return [r for _, _, r in sorted(keyed, key=lambda t: (t[0], t[1]))]


def train_wide_tasks() -> list[TaskRow]:
    """The training split plus the extra arithmetic tasks, interleaved kind by kind (see the module docstring);
    fresh copies."""
    train = train_tasks()
    arithmetic = _spread([r for r in train if r.metadata["kind"] == "arithmetic"], list(_wide_arithmetic()))
    return _copies(_interleave(arithmetic + [r for r in train if r.metadata["kind"] != "arithmetic"]))
