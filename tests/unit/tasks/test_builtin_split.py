"""The train / held-out split of the built-in tasks: disjoint numbers, entities and answers."""

from __future__ import annotations

import hashlib
import json
import re

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
from streamgrpo.tasks.reader import read_rows

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


def test_no_number_of_a_heldout_task_appears_in_any_train_task() -> None:
    train_numbers = set().union(*(_numbers(_text(r)) for r in train_tasks()))
    for r in heldout_tasks():
        assert not _numbers(_text(r)) & train_numbers, r.question


def test_no_answer_or_entity_is_shared() -> None:
    train = train_tasks()
    train_text = "\n".join(_text(r) for r in train)
    train_answers = {a for r in train for a in r.ground_truths}
    for r in heldout_tasks():
        assert not set(r.ground_truths) & train_answers, r.question
        names = re.findall(r"Kingdom of ([A-Z]\w+)|was ([A-Z]\w+ [A-Z]\w+) born|population of ([A-Z]\w+)", r.question)
        for part in (p for name in names for p in name if p):
            assert not re.search(rf"\b{part}\b", train_text), (part, r.question)


def test_heldout_arithmetic_uses_phrasings_never_trained_on() -> None:
    train_openings = {" ".join(r.question.split()[:2]) for r in train_tasks() if r.metadata["kind"] == "arithmetic"}
    for r in heldout_tasks():
        if r.metadata["kind"] == "arithmetic":
            assert " ".join(r.question.split()[:2]) not in train_openings, r.question


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
            for word in ARITHMETIC_WORDINGS[k]:
                assert _numbers(word(a, b, c)) == _numbers(question), (word(a, b, c), question)


def test_the_heldout_split_is_the_one_every_published_figure_used() -> None:
    """docs/learning.md and BENCHMARKS.md compare runs on these 94 tasks; a change to the train split must not move
    them (their operands are drawn from the numbers no train task uses)."""
    blob = json.dumps([[r.question, r.ground_truths, r.metadata] for r in heldout_tasks()], sort_keys=True)
    assert hashlib.sha256(blob.encode()).hexdigest() == HELDOUT_SHA256
