"""Demonstrations as data: the file format's errors, and the built-in expert (training split only, every kind)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from streamgrpo.tasks import builtin
from streamgrpo.tasks.datasets import RowError
from streamgrpo.tasks.demos import check_steps, expert_demos, iter_demos, step_text
from streamgrpo.tasks.reader import read_demo_rows


def test_the_expert_demonstrates_every_training_task_of_every_kind_and_nothing_else() -> None:
    demos = expert_demos()
    train = builtin.train_tasks()
    assert [d.task.question for d in demos] == [r.question for r in train]
    assert Counter(d.task.metadata["kind"] for d in demos) == Counter(r.metadata["kind"] for r in train)
    assert set(Counter(d.task.metadata["kind"] for d in demos)) == {"arithmetic", "lookup", "two_step", "history"}
    for d in demos:
        check_steps(d.steps)
        assert json.loads(d.steps[-1]) == {"answer": d.task.ground_truths[0]}
        assert d.demo_source == "builtin-expert"
    tools = Counter(json.loads(s)["tool"] for d in demos for s in d.steps[:-1])
    assert tools["knowledge_search"] >= 200 and tools["calculator"] >= 200


def _numbers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\d+", text)}


def test_no_held_out_entity_number_or_phrasing_appears_in_any_demonstration() -> None:
    """The expert writes only its own training task's facts: every number in its steps is in the task (question,
    truth, metadata) or in what its own tool calls returned; no held-out entity or question appears."""
    from streamgrpo.rollout.tools import build_tools, call_tool

    tools = build_tools(["calculator", "knowledge_search"])
    heldout = builtin.heldout_tasks()
    names = builtin._heldout_names()
    heldout_questions = {r.question for r in heldout}
    openings = {" ".join(r.question.split()[:2]) for r in heldout if r.metadata["kind"] == "arithmetic"}
    for d in expert_demos():
        text = " ".join([d.task.question, *d.steps])
        assert d.task.question not in heldout_questions
        assert not any(re.search(rf"\b{re.escape(n)}\b", text) for n in names), text
        observed = [call_tool(tools, json.loads(s)["tool"], json.loads(s)["input"]).output for s in d.steps[:-1]]
        own = _numbers(" ".join([d.task.question, *d.task.ground_truths, *d.task.metadata.values(), *observed]))
        assert _numbers(" ".join(d.steps)) - own - {2, 7} == set(), text  # 2 of "**2", 7 of "(b - 7)"
        assert " ".join(d.task.question.split()[:2]) not in openings, d.task.question


def test_the_demonstrated_tool_calls_see_the_answer_in_what_the_planner_is_shown() -> None:
    """Every search the expert writes returns a passage holding what the next step needs, within the 160 characters
    of an observation the planner's prompt shows (so the answer is read from the observation, not memorised)."""
    from streamgrpo.rollout.tools import build_tools, call_tool

    tools = build_tools(["calculator", "knowledge_search"])
    for d in expert_demos():
        seen = []
        for step in d.steps[:-1]:
            call = json.loads(step)
            result = call_tool(tools, call["tool"], call["input"])
            assert result.error is None, (step, result.error)
            seen.append(result.output[:160].lower())
        assert any(d.task.ground_truths[0].lower() in s for s in seen), (d.task.question, d.steps, seen)


def test_a_demonstration_file_reads_rows_and_names_each_bad_field(tmp_path: Path) -> None:
    path = tmp_path / "demos.jsonl"
    rows = [
        {"question": "What is 6 times 7?", "answer": "42",
         "steps": [{"tool": "calculator", "input": "6*7"}, {"answer": "42"}]},
        {"question": "No truth", "steps": [{"answer": "1"}]},
        {"question": "Answer first", "answer": "1", "steps": [{"answer": "1"}, {"tool": "calculator", "input": "1"}]},
        {"question": "Bad keys", "answer": "1", "steps": [{"tool": "calculator", "query": "1"}, {"answer": "1"}]},
        {"question": "Not a list", "answer": "1", "steps": "calculator 1"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    got = list(iter_demos(path))
    first = got[0][1]
    assert not isinstance(first, RowError)
    assert first.steps == ('{"tool": "calculator", "input": "6*7"}', '{"answer": "42"}')
    assert first.demo_source == "file:demos.jsonl" and first.source == "generic" and first.ground_truths == ["42"]
    errors = [e for _, e in got[1:]]
    assert all(isinstance(e, RowError) for e in errors)
    assert [(e.row, e.field) for e in errors] == [(2, "answer"), (3, "steps"), (4, "steps"), (5, "steps")]  # type: ignore[union-attr]
    assert "ends with its one answer step" in str(errors[1])


def test_steps_are_written_as_the_planner_writes_them_and_refused_otherwise() -> None:
    assert step_text({"tool": "knowledge_search", "input": "capital of Velmora"}) == \
        '{"tool": "knowledge_search", "input": "capital of Velmora"}'
    assert step_text({"answer": 42}) == '{"answer": "42"}'
    for bad in ({"tool": "", "input": "x"}, {"answer": ["x"]}, {"tool": "calculator"}, {}):
        with pytest.raises(ValueError):
            step_text(bad)
    with pytest.raises(ValueError, match="1..8 steps"):
        check_steps([])


def test_only_the_training_split_has_built_in_demonstrations() -> None:
    assert sum(1 for _ in read_demo_rows("builtin:train")) == len(builtin.train_tasks())
    from streamgrpo.tasks.datasets import DatasetError

    with pytest.raises(DatasetError, match="builtin:train only"):
        read_demo_rows("builtin:heldout")
