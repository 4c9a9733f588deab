"""The train / held-out split of the built-in tasks: disjoint numbers, entities and answers.

The rules are checked for both training sets, ``builtin:train`` and ``builtin:train-wide`` (the training split plus
the extra arithmetic tasks of ``tasks/builtin_wide.py``), against the one held-out split, whose sha256 is pinned.
Each rule is a function that lists the rows breaking it, and a test feeds it forged rows to show it catches them.
Not covered: whether a wording is good English, or how hard a task is for a model.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, replace

import pytest

from streamgrpo.rollout.tools.calculator import evaluate
from streamgrpo.tasks.builtin import (
    ARITHMETIC_TEMPLATES,
    ARITHMETIC_WORDINGS,
    HISTORY,
    builtin_corpus,
    builtin_tasks,
    heldout_tasks,
    train_tasks,
)
from streamgrpo.tasks.builtin_wide import (
    N_WIDE_ARITHMETIC,
    WIDE_WORDINGS,
    forbidden_numbers,
    train_wide_tasks,
)
from streamgrpo.tasks.datasets import TaskRow
from streamgrpo.tasks.reader import BUILTIN_NAMES, read_rows

#: sha256 of the held-out split (questions, answers, metadata) since the split was introduced
HELDOUT_SHA256 = "1bfe14da22d3b9821e5b344adf7ffeb8a19882e01d86a679444bab23eb1c7f5a"


def _numbers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\d+", text)}


def _text(row) -> str:  # type: ignore[no-untyped-def]
    return " ".join([row.question, *row.ground_truths])


def test_the_splits_partition_the_builtin_set_with_unique_ids() -> None:
    train, held = train_tasks(), heldout_tasks()
    assert len(train) >= 250 and len(held) >= 80
    ids = [r.metadata["row_id"] for r in train + held]
    assert len(set(ids)) == len(ids)
    assert {r.metadata["row_id"] for r in builtin_tasks()} == set(ids)
    assert {r.metadata["split"] for r in train} == {"train"} and {r.metadata["split"] for r in held} == {"heldout"}
    assert {r.metadata["kind"] for r in held} == {"arithmetic", "lookup", "two_step", "history"}


TRAIN_SPLITS = pytest.mark.parametrize("train_split", [train_tasks, train_wide_tasks], ids=["train", "train-wide"])


def _number_leaks(train: list[TaskRow]) -> list[str]:
    """Held-out tasks that write a number some ``train`` task writes."""
    train_numbers = set().union(*(_numbers(_text(r)) for r in train))
    return [r.question for r in heldout_tasks() if _numbers(_text(r)) & train_numbers]


def _shared_answers_or_entities(train: list[TaskRow]) -> list[str]:
    """Held-out tasks whose answer some ``train`` task has, or whose entity some ``train`` task names."""
    train_text = "\n".join(_text(r) for r in train)
    train_answers = {a for r in train for a in r.ground_truths}
    out = []
    for r in heldout_tasks():
        names = re.findall(r"Kingdom of ([A-Z]\w+)|was ([A-Z]\w+ [A-Z]\w+) born|population of ([A-Z]\w+)", r.question)
        parts = [p for name in names for p in name if p]
        if set(r.ground_truths) & train_answers or any(re.search(rf"\b{p}\b", train_text) for p in parts):
            out.append(r.question)
    return out


def _trained_phrasings(train: list[TaskRow]) -> list[str]:
    """Held-out arithmetic tasks whose first two words open some ``train`` arithmetic task."""
    train_openings = {" ".join(r.question.split()[:2]) for r in train if r.metadata["kind"] == "arithmetic"}
    return [r.question for r in heldout_tasks()
            if r.metadata["kind"] == "arithmetic" and " ".join(r.question.split()[:2]) in train_openings]


def _heldout_frames(train: list[TaskRow]) -> list[str]:
    """``train`` arithmetic tasks whose sentence frame, or its first two words, is a held-out task's (any kind)."""
    held = {_frame(r.question) for r in heldout_tasks()}
    openings = {" ".join(f.split()[:2]) for f in held}
    return [r.question for r in train if r.metadata["kind"] == "arithmetic"
            and (_frame(r.question) in held or " ".join(_frame(r.question).split()[:2]) in openings)]


@TRAIN_SPLITS
def test_no_number_of_a_heldout_task_appears_in_any_train_task(train_split: Callable[[], list[TaskRow]]) -> None:
    assert _number_leaks(train_split()) == []


@TRAIN_SPLITS
def test_no_answer_or_entity_is_shared(train_split: Callable[[], list[TaskRow]]) -> None:
    assert _shared_answers_or_entities(train_split()) == []


@TRAIN_SPLITS
def test_heldout_arithmetic_uses_phrasings_never_trained_on(train_split: Callable[[], list[TaskRow]]) -> None:
    assert _trained_phrasings(train_split()) == []
    assert _heldout_frames(train_split()) == []


def test_heldout_answers_are_right() -> None:
    corpus = {p.text for p in builtin_corpus()}
    years = {str(y) for y, _, _ in HISTORY}
    for r in heldout_tasks():
        truth = r.ground_truths[0]
        if m := re.match(r"Compute (\d+ \+ \d+)\.", r.question):
            key = str(evaluate(m.group(1)))
            holders = [t for t in corpus if re.search(rf"\byear {key}\b", t)]
            assert len(holders) == 1 and truth in holders[0], r.question
        elif r.metadata["kind"] == "lookup":
            assert any(truth in t for t in corpus), r.question
        assert r.metadata.get("year", "0") in years | {"0"}


def test_reader_serves_each_split_by_name() -> None:
    assert [row for _, row in read_rows("builtin:heldout")] == heldout_tasks()
    assert [row for _, row in read_rows("builtin:train")] == train_tasks()
    assert [row for _, row in read_rows("builtin:train-wide")] == train_wide_tasks()
    assert "builtin:train-wide" in BUILTIN_NAMES


def _frame(question: str) -> str:
    """A question's sentence frame: its words with every number replaced by #."""
    return re.sub(r"\d+", "#", question)


def test_train_arithmetic_is_asked_in_symbols_and_in_words_never_in_a_heldout_frame() -> None:
    train = [r for r in train_tasks() if r.metadata["kind"] == "arithmetic"]
    held = {_frame(r.question) for r in heldout_tasks() if r.metadata["kind"] == "arithmetic"}
    frames = {_frame(r.question) for r in train}
    assert not frames & held
    symbolic = [r for r in train if re.match(r"What is [(\d]", r.question) and "divided" not in r.question]
    assert len(train) // 5 <= len(symbolic) <= len(train) // 2, "a third of the rows stay in symbols"
    assert len(frames) == len(ARITHMETIC_TEMPLATES) * (1 + 2), sorted(frames)


def test_each_wording_asks_for_its_operations_answer_with_the_same_numbers() -> None:
    """The held-out operands avoid every train number: a wording that wrote another number would move the
    held-out split. Checked on the operand ranges the split draws from."""
    for k, (_, make) in enumerate(ARITHMETIC_TEMPLATES):
        for a, b, c in ((101, 12, 10), (999, 99, 999), (413, 24, 416), (270, 62, 767)):
            question, answer = make(a, b, c)
            for word in ARITHMETIC_WORDINGS[k] + WIDE_WORDINGS[k]:
                assert _numbers(word(a, b, c)) == _numbers(question), (word(a, b, c), question)


def test_the_heldout_split_is_the_one_every_published_figure_used() -> None:
    """docs/learning.md and BENCHMARKS.md compare runs on these 94 tasks; a change to the train split must not move
    them (their operands are drawn from the numbers no train task uses)."""
    blob = json.dumps([[r.question, r.ground_truths, r.metadata] for r in heldout_tasks()], sort_keys=True)
    assert hashlib.sha256(blob.encode()).hexdigest() == HELDOUT_SHA256


# -- builtin:train-wide ------------------------------------------------------------------------------------------


def _extra(rows: list[TaskRow]) -> list[TaskRow]:
    return [r for r in rows if r.metadata["row_id"].startswith("builtin-wide-arithmetic-")]


def test_the_wide_split_is_the_train_split_plus_extra_arithmetic_with_unique_ids() -> None:
    train, wide, held = train_tasks(), train_wide_tasks(), heldout_tasks()
    extra = _extra(wide)
    assert len(extra) == N_WIDE_ARITHMETIC and len(wide) == len(train) + N_WIDE_ARITHMETIC
    by_id = {r.metadata["row_id"]: r for r in wide}
    assert len(by_id) == len(wide) and not set(by_id) & {r.metadata["row_id"] for r in held}
    assert all(by_id[r.metadata["row_id"]] == r for r in train), "every training task, unchanged"
    assert {r.metadata["kind"] for r in extra} == {"arithmetic"} and {r.metadata["split"] for r in wide} == {"train"}
    assert len({r.question for r in wide}) == len(wide)
    assert set(by_id) == {r.metadata["row_id"] for r in train} | {r.metadata["row_id"] for r in extra}
    assert not {r.metadata["row_id"] for r in extra} & {r.metadata["row_id"] for r in builtin_tasks()}, "not in builtin"


def test_the_extra_tasks_cover_every_operation_and_phrasing() -> None:
    """About 53 extra tasks per operation, each of its 7 phrasings (symbols, 2 training wordings, 4 wide ones) used
    at least 7 times, with the operation's difficulty; no extra task writes a held-out or archive number."""
    extra = _extra(train_wide_tasks())
    frames = Counter(_frame(r.question) for r in extra)
    assert len(frames) == len(ARITHMETIC_TEMPLATES) * (1 + 2 + 4) and min(frames.values()) >= 7, frames
    per_difficulty = Counter(r.metadata["difficulty"] for r in extra)
    assert all(abs(n - N_WIDE_ARITHMETIC / 3) <= 2 for n in per_difficulty.values()), per_difficulty
    held = set().union(*(_numbers(_text(r)) for r in heldout_tasks()))
    archive = set().union(*(_numbers(p.text) for p in builtin_corpus()))
    assert forbidden_numbers() == held | archive
    assert not [r.question for r in extra if _numbers(_text(r)) & (held | archive)]


def test_the_wide_split_interleaves_kinds_and_spreads_the_extra_arithmetic() -> None:
    """Kind by kind as train_tasks(); within arithmetic one training task then about four extra ones, so the start
    of a run already meets fresh arithmetic; every kind keeps its own order."""
    train, wide = train_tasks(), train_wide_tasks()
    assert all(len({r.metadata["kind"] for r in wide[i:i + 4]}) == 4 for i in range(0, 160, 4))
    for kind in ("lookup", "two_step", "history"):
        assert [r for r in wide if r.metadata["kind"] == kind] == [r for r in train if r.metadata["kind"] == kind]
    arithmetic = [r for r in wide if r.metadata["kind"] == "arithmetic"]
    original = [r for r in arithmetic if not r.metadata["row_id"].startswith("builtin-wide-")]
    assert original == [r for r in train if r.metadata["kind"] == "arithmetic"]
    assert _extra(arithmetic) == _extra(wide) and _extra(wide)[0] in wide[:8]
    for start in range(0, len(arithmetic) - 50, 50):
        assert 8 <= sum(r in original for r in arithmetic[start:start + 50]) <= 12, start


def test_the_split_rules_catch_an_extra_task_that_breaks_them() -> None:
    """Each rule above lists a forged extra task that breaks it (so a passing check is not vacuous)."""
    wide = train_wide_tasks()
    extra = _extra(wide)[0]
    held = [r for r in heldout_tasks() if r.metadata["kind"] == "arithmetic"][0]
    number = min(_numbers(_text(held)))
    reuses_number = replace(extra, question=f"What is {number} * 3?", ground_truths=[str(number * 3)])
    assert held.question in _number_leaks(wide + [reuses_number])
    reuses_answer = replace(extra, ground_truths=list(held.ground_truths))
    assert held.question in _shared_answers_or_entities(wide + [reuses_answer])
    lookup = next(r for r in heldout_tasks() if "Kingdom of" in r.question)
    kingdom = re.search(r"Kingdom of (\w+)", lookup.question).group(1)  # type: ignore[union-attr]
    names_entity = replace(extra, question=f"A shop in {kingdom} sold 3 items and 4 more. How many in all?")
    assert lookup.question in _shared_answers_or_entities(wide + [names_entity])
    frame_words = held.question.split()[:2]
    opens_alike = replace(extra, question=" ".join(frame_words) + " something else entirely?")
    assert held.question in _trained_phrasings(wide + [opens_alike])
    subtracts = replace(extra, question="Subtract 5 from the sum of 9 and 3.")
    assert _heldout_frames(wide + [subtracts]) == [subtracts.question]


def test_the_wide_split_is_deterministic_across_processes() -> None:
    """A fresh interpreter (another hash seed) produces the identical wide split (this checkout's code)."""
    code = ("import json, dataclasses; from streamgrpo.tasks.builtin_wide import train_wide_tasks; "
            "print(json.dumps([dataclasses.asdict(x) for x in train_wide_tasks()]))")
    env = {"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin",
           **{k: os.environ[k] for k in ("PYTHONPATH", "PYTHONSAFEPATH") if k in os.environ}}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert json.loads(other.stdout) == [asdict(r) for r in train_wide_tasks()]
