"""The wall-clock / memory bound of in-process tools: a helper process that is killed on timeout."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from streamgrpo.rollout.tools.bounded import BoundedCall
from streamgrpo.rollout.tools.errors import ToolInputError


@pytest.fixture
def evaluator() -> Iterator[BoundedCall]:
    # eval in the helper stands for a tool function with an unforeseen slow or greedy input.
    call = BoundedCall("builtins:eval", wall_seconds=1.0, memory_mb=256)
    yield call
    call.close()


def test_answers_and_errors_come_back(evaluator: BoundedCall) -> None:
    assert evaluator("str(6 * 7)") == "42"
    with pytest.raises(ToolInputError, match="ZeroDivisionError"):
        evaluator("1 / 0")


def test_a_call_over_the_wall_clock_is_killed_and_the_next_one_works(evaluator: BoundedCall) -> None:
    assert evaluator("str(1 + 1)") == "2"
    first = evaluator._proc
    assert first is not None
    with pytest.raises(ToolInputError, match=r"timed out after 1s"):
        evaluator("str(round(1, -10**7))")  # ~17 s of one C-level operation: only a kill stops it
    assert first.poll() == -signal.SIGKILL
    assert evaluator("str(2 + 2)") == "4"
    assert evaluator._proc is not first


def test_memory_is_bounded(evaluator: BoundedCall) -> None:
    with pytest.raises(ToolInputError, match="out of memory"):
        evaluator("str(len(bytearray(2 * 1024 ** 3)))")
    assert evaluator("str(3)") == "3"


def test_a_helper_that_dies_is_replaced(evaluator: BoundedCall) -> None:
    assert evaluator("str(1)") == "1"
    assert evaluator._proc is not None
    dead = evaluator._proc
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait()
    assert evaluator("str(5)") == "5"
    assert evaluator._proc is not dead
