"""The child process that runs the math checks: soft budget, hard deadline, memory limit, errors."""

from __future__ import annotations

import time

import pytest

from streamgrpo.judge.scorers.isolated import DeadlineExceeded, IsolatedCallError, IsolatedFunction


def test_soft_budget_answers_and_keeps_the_child() -> None:
    f = IsolatedFunction(time.sleep, soft_s=0.2, hard_s=10)
    try:
        f(0)
        pid = f.pid
        t = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="budget"):
            f(30)
        assert time.monotonic() - t < 5
        f(0)
        assert f.pid == pid
    finally:
        f.close()


def test_hard_deadline_kills_and_the_next_call_starts_a_new_child() -> None:
    f = IsolatedFunction(time.sleep, hard_s=0.5)  # no soft budget: only the parent's deadline stops it
    try:
        f(0)
        pid = f.pid
        with pytest.raises(DeadlineExceeded, match="killed"):
            f(30)
        assert f.pid is None
        f(0)
        assert f.pid not in (None, pid)
    finally:
        f.close()


def test_errors_and_memory_limit_are_reported() -> None:
    f = IsolatedFunction(bytearray, hard_s=30, mem_bytes=1 << 30)
    try:
        assert f(3) == bytearray(3)
        with pytest.raises(IsolatedCallError, match="MemoryError"):
            f(4 << 30)
        with pytest.raises(IsolatedCallError, match="TypeError"):
            f(object())
    finally:
        f.close()
