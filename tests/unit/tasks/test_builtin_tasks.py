from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict

from streamgrpo.rollout.tools.calculator import evaluate
from streamgrpo.tasks.builtin import HISTORY, builtin_corpus, builtin_tasks, train_tasks
from streamgrpo.tasks.builtin_wide import train_wide_tasks


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
# ... and the wide pool's wordings (tasks/builtin_wide.py WIDE_WORDINGS, builtin:train-wide only), keyed by their
# whole sentence frame (every number written #), so that a wording whose words change no longer matches its expression
_WIDE_FRAMES = {
    "Each crate holds # jars. How many jars do # crates hold?": "{0} * {1}",
    "A ticket costs # dollars. What is the price of # tickets, in dollars?": "{0} * {1}",
    "A cyclist rides # km a day for # days. How many km is that in all?": "{0} * {1}",
    "Over # weeks a bakery bakes # loaves per week. How many loaves does it bake?": "{0} * {1}",
    "A library has # books and buys # more. How many books does it have now?": "{0} + {1}",
    "Your account holds # dollars and you deposit # dollars. What is the new balance?": "{0} + {1}",
    "A road trip covers # km in the first week and # km in the second. How far is that altogether?": "{0} + {1}",
    "Combine a batch of # screws with a batch of # screws. How many screws are there?": "{0} + {1}",
    "A warehouse stocks # shelves with # cans each, then ships out # cans. How many cans stay?": "{0} * {1} - {2}",
    "You earn # dollars a day for # days and spend # dollars. How many dollars do you keep?": "{0} * {1} - {2}",
    "A truck makes # trips of # km; # km of them are on gravel. How many km are on paved road?": "{0} * {1} - {2}",
    "From # batches of # bolts, # bolts fail inspection. How many bolts pass?": "{0} * {1} - {2}",
    "A square plot measures # m by # m, and a strip of # square metres is added. "
    "What is the total area in square metres?": "{0} * {1} + {2}",
    "Square the number #, then add #. What do you get?": "{0} ** 2 + {1}",
    "A tray holds # rows of # cups, and # more cups sit beside it. How many cups are there?": "{0} * {1} + {2}",
    "Starting from #, add the square of #. Which number do you reach?": "{0} + {1} * {1}",
    "A club has # members and # guests; each of them pays # dollars minus a # dollar discount. "
    "What is the total paid, in dollars?": "({0} + {1}) * ({2} - {3})",
    "Put # boxes and # boxes together; every box carries # items, but # items are taken out of each box. "
    "How many items remain?": "({0} + {1}) * ({2} - {3})",
    "The sum of # and # is multiplied by # less than #. What is the result?": "({0} + {1}) * ({3} - {2})",
    "A factory runs # day shifts and # night shifts; each shift makes # parts, # of which are rejected. "
    "How many good parts are made?": "({0} + {1}) * ({2} - {3})",
    "A farmer packs # eggs into cartons of #. How many full cartons does she fill?": "{0} // {1}",
    "With # dollars, how many tickets at # dollars each can you buy?": "{0} // {1}",
    "A road of # metres is cut into sections of # metres. How many complete sections are there?": "{0} // {1}",
    "Split # marbles into bags of #. How many bags are completely full?": "{0} // {1}",
}


def _expression(question: str, worded: dict[str, str]) -> tuple[str, str | None]:
    """The expression ``question`` asks for, and the opening of its wording (None: written in symbols)."""
    m = re.fullmatch(r"What is (\(?\d.+|the integer part .+)\?", question)
    if m:
        expr = m.group(1).replace(" squared", "**2").replace(" plus ", " + ")
        if expr.startswith("the integer part of "):
            a, b = expr.removeprefix("the integer part of ").split(" divided by ")
            expr = f"{a} // {b}"
        return expr, None
    opening = next(o for o in worded if question.startswith(o + " "))
    return worded[opening].format(*re.findall(r"\d+", question)), opening


def test_arithmetic_ground_truth_is_correct() -> None:
    worded = 0
    for r in train_tasks():
        if r.metadata["kind"] != "arithmetic":
            continue
        expr, opening = _expression(r.question, _WORDED)
        worded += opening is not None
        assert str(evaluate(expr)) == r.ground_truths[0], (r.question, expr)
    assert worded >= 40


def test_wide_arithmetic_ground_truth_is_correct() -> None:
    """Every arithmetic task of builtin:train-wide (79 training + 320 extra) answers what its words ask, by the
    calculator, and every wording of either table is used."""
    used: Counter[str | None] = Counter()
    arithmetic = [r for r in train_wide_tasks() if r.metadata["kind"] == "arithmetic"]
    for r in arithmetic:
        frame = re.sub(r"\d+", "#", r.question)
        opening: str | None
        if frame in _WIDE_FRAMES:
            expr, opening = _WIDE_FRAMES[frame].format(*re.findall(r"\d+", r.question)), frame
        else:
            expr, opening = _expression(r.question, _WORDED)
        used[opening] += 1
        assert str(evaluate(expr)) == r.ground_truths[0], (r.question, expr)
    assert len(arithmetic) >= 390 and set(used) == {None, *_WORDED, *_WIDE_FRAMES}, used


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
    code = ("import sys; import streamgrpo.tasks.builtin, streamgrpo.tasks.builtin_wide, streamgrpo.tasks.datasets; "
            "print([m for m in ('torch', 'faust', 'transformers', 'datasets') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
