"""The fan-out's intake check of a demonstration: steps that are not planner replies ending in one answer, or more
steps than the rollouts' turn budget, are refused (dead-lettered as ``invalid_demonstration``); a good one is a group
of one request carrying its steps."""

from __future__ import annotations

import pytest

from streamgrpo.avro import records as R
from streamgrpo.streams.fanout import FanoutPolicy, check_task, fan_out

CALL, ANSWER = '{"tool": "calculator", "input": "6*7"}', '{"answer": "42"}'
POLICY = FanoutPolicy("planner", 3, R.SamplingParams(0.7, 1.0, 48), 4, 1, 8)


def task(steps: list[str]) -> R.Task:
    return R.Task(R.Envelope.new("test", task_id="t"), "What is 6 times 7?", "builtin", 8, ["42"],
                  demonstration=R.Demonstration(steps, "file:d.jsonl"))


@pytest.mark.parametrize(("steps", "words"), [
    ([CALL, CALL, CALL, ANSWER], "max_turns = 3"),
    ([CALL, CALL], "ends with its one answer step"),
    (["calculator 6*7", ANSWER], "not one JSON object"),
    ([], "1..8 steps"),
])
def test_a_demonstration_the_rollouts_cannot_give_is_refused(steps: list[str], words: str) -> None:
    problem = check_task(task(steps), 100, POLICY.max_turns)
    assert problem is not None and problem[0] == "invalid_demonstration" and words in problem[1], problem


def test_a_good_demonstration_is_a_group_of_one_carrying_its_steps() -> None:
    good = task([CALL, ANSWER])
    assert check_task(good, 100, POLICY.max_turns) is None
    (request,) = fan_out(good, 3, POLICY)
    assert request.group_size == 1 and request.demonstration == good.demonstration and request.adapter_version == 3
