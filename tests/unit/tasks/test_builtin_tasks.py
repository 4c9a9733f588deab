from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict

from streamgrpo.rollout.tools.calculator import evaluate
from streamgrpo.tasks.builtin import HISTORY, builtin_corpus, builtin_tasks, train_tasks


def test_at_least_200_tasks_of_every_kind_with_unique_stable_ids() -> None:
    rows = builtin_tasks()
    assert len(rows) >= 200
    kinds = Counter(r.metadata["kind"] for r in rows)
    assert set(kinds) == {"arithmetic", "lookup", "two_step", "history"} and min(kinds.values()) >= 40
    ids = [r.metadata["row_id"] for r in rows]
    assert len(set(ids)) == len(ids)
    for r in rows:
        assert r.source == "builtin" and r.question.strip() and r.ground_truths
        assert r.metadata["difficulty"] in {"easy", "medium", "hard"}
        assert all(isinstance(v, str) for v in r.metadata.values())


def test_deterministic_across_processes() -> None:
    """A fresh interpreter (another hash seed) produces byte-identical tasks and corpus."""
    code = ("import json, dataclasses; from streamgrpo.tasks.builtin import builtin_tasks, builtin_corpus; "
            "print(json.dumps([dataclasses.asdict(x) for x in builtin_tasks() + builtin_corpus()]))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    here = [asdict(x) for x in builtin_tasks() + builtin_corpus()]
    assert json.loads(other.stdout) == here


def test_returned_rows_are_copies() -> None:
    rows = builtin_tasks()
    rows[0].ground_truths.append("tampered")
    assert "tampered" not in builtin_tasks()[0].ground_truths


# Worded training arithmetic: (first words of the wording) -> the expression its numbers (in order of appearance)
# denote. Written apart from tasks/builtin.py so that a wording asking for something else than its answer fails.
_WORDED = {
    "Find the product of": "{0} * {1}", "What do": "{0} * {1}",
    "What is the total": "{0} + {1}", "A shop sold": "{0} + {1}",
    "Take": "{0} * {1} - {2}", "There are": "{0} * {1} - {2}",
    "Find the square of": "{0} ** 2 + {1}", "What number is": "{1} * {1} + {0}",
    "Find the sum of": "({0} + {1}) * ({2} - {3})", "Increase": "({0} + {1}) * ({2} - {3})",
    "How many whole times": "{1} // {0}", "If": "{0} // {1}",
}


def test_arithmetic_ground_truth_is_correct() -> None:
    worded = 0
    for r in train_tasks():
        if r.metadata["kind"] != "arithmetic":
            continue
        m = re.fullmatch(r"What is (\(?\d.+|the integer part .+)\?", r.question)
        if m:
            expr = m.group(1).replace(" squared", "**2").replace(" plus ", " + ")
            if expr.startswith("the integer part of "):
                a, b = expr.removeprefix("the integer part of ").split(" divided by ")
                expr = f"{a} // {b}"
        else:
            opening = next(o for o in _WORDED if r.question.startswith(o + " "))
            expr = _WORDED[opening].format(*re.findall(r"\d+", r.question))
            worded += 1
        assert str(evaluate(expr)) == r.ground_truths[0], (r.question, expr)
    assert worded >= 40


def test_two_step_answers_follow_from_the_corpus() -> None:
    corpus = builtin_corpus()
    for r in builtin_tasks():
        if r.metadata["kind"] not in ("two_step", "history") or "that year" not in r.question:
            continue
        m = re.match(r"(?:Compute|Calculate) (\d+) squared|Compute (\d+ [*+] \d+)\.", r.question)
        assert m, r.question
        year = int(m.group(1)) ** 2 if m.group(1) else evaluate(m.group(2))
        matches = [p for p in corpus if re.search(rf"\byear {year}\b", p.text)]
        assert len(matches) == 1, (r.question, year)  # the key names exactly one passage
        assert r.ground_truths[0] in matches[0].text, r.question


def test_lookup_answers_are_unambiguous() -> None:
    corpus = builtin_corpus()
    for r in builtin_tasks():
        if r.metadata["kind"] == "lookup":
            holders = [p for p in corpus if r.ground_truths[0] in p.text]
            subject = (re.search(r"Kingdom of (\w+)", r.question) or re.search(r"invented the ([\w ]+)\?", r.question)
                       or re.search(r"was (\w+ \w+) born", r.question))
            assert holders and subject, r.question
            # exactly one passage holds both the subject and the answer
            assert sum(subject.group(1) in p.text for p in holders) == 1, r.question


def test_seed_example_and_real_events() -> None:
    rows = builtin_tasks()
    seed = [r for r in rows if r.question.startswith("Calculate 12 squared")]
    assert len(seed) == 1 and seed[0].ground_truths == ["Marcion"]
    by_id = {p.id: p for p in builtin_corpus()}
    assert "Marcion of Sinope was excommunicated by the church of Rome" in by_id["history-0144"].text
    assert len(HISTORY) >= 30 and len({y for y, _, _ in HISTORY}) == len(HISTORY)
    for _, text, answer in HISTORY:
        assert answer in text


def test_import_stays_light() -> None:
    code = ("import sys; import streamgrpo.tasks.builtin, streamgrpo.tasks.datasets; "
            "print([m for m in ('torch', 'faust', 'transformers', 'datasets') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
