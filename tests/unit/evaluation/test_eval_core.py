"""The statistics of an evaluation: Wilson intervals, mean@k, pass@k, paired differences."""

from __future__ import annotations

import math
import random

import pytest

from streamgrpo.evaluation.core import (
    Outcome,
    mean_interval,
    paired_difference,
    summarise,
    task_set_hash,
    wilson,
)


def o(task: int, correct: bool, *, kind: str = "arithmetic", answered: bool = True, actions: int = 2,
      fails: int = 0, tools: int = 1, tokens: int = 20) -> Outcome:
    return Outcome(task, kind, correct, answered, turns=actions, tool_calls=tools, tokens=tokens, actions=actions,
                   parse_failures=fails)


def test_wilson_matches_the_closed_form() -> None:
    # 7/20 at 95%: reference values (Wilson score interval)
    low, high = wilson(7, 20)
    assert low == pytest.approx(0.1812, abs=1e-4) and high == pytest.approx(0.5671, abs=1e-4)
    assert wilson(0, 10)[0] == pytest.approx(0.0, abs=1e-12) and wilson(10, 10)[1] == pytest.approx(1.0)
    assert wilson(0, 0) == (0.0, 1.0)


def test_wilson_covers_the_true_rate_about_95_percent_of_the_time() -> None:
    rng = random.Random(1)
    p, n, trials = 0.3, 40, 4000
    covered = 0
    for _ in range(trials):
        k = sum(rng.random() < p for _ in range(n))
        low, high = wilson(k, n)
        covered += low <= p <= high
    assert 0.93 <= covered / trials <= 0.97


def test_summary_for_one_sample_per_task() -> None:
    outs = [o(0, True), o(1, False, answered=False, fails=1), o(2, True, kind="lookup"), o(3, False, kind="lookup")]
    s = summarise(outs)
    assert (s.tasks, s.samples_per_task, s.accuracy, s.pass_at_k) == (4, 1, 0.5, None)
    assert (s.ci_low, s.ci_high) == wilson(2, 4)
    assert s.answered_rate == 0.75 and s.parse_failure_rate == 1 / 8
    assert s.per_kind == {"arithmetic": 0.5, "lookup": 0.5}


def test_summary_for_k_samples_per_task_is_mean_at_k_with_pass_at_k() -> None:
    outs = [o(0, True), o(0, False), o(1, False), o(1, False), o(2, True), o(2, True)]
    s = summarise(outs)
    assert s.samples_per_task == 2
    assert s.accuracy == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert s.pass_at_k == pytest.approx(2 / 3)
    mean, low, high = mean_interval([0.5, 0.0, 1.0])
    assert (s.ci_low, s.ci_high) == (max(0.0, low), min(1.0, high)) and mean == s.accuracy


def test_paired_difference_counts_flips_and_its_interval_excludes_zero_for_a_clear_gain() -> None:
    base = [o(i, i < 5) for i in range(40)]
    better = [o(i, i < 25) for i in range(40)]
    d = paired_difference(base, better)
    assert d.tasks == 40 and d.mean == pytest.approx(0.5) and (d.a_only, d.b_only) == (0, 20)
    assert d.ci_low > 0
    same = paired_difference(base, base)
    assert same.mean == 0 and same.ci_low == same.ci_high == 0
    with pytest.raises(ValueError):
        paired_difference(base, [o(99, True)])


def test_task_set_hash_depends_on_questions_answers_and_order() -> None:
    a = task_set_hash([("q1", ["1"]), ("q2", ["2"])])
    assert a == task_set_hash([("q1", ["1"]), ("q2", ["2"])]) and len(a) == 16
    assert a != task_set_hash([("q2", ["2"]), ("q1", ["1"])])
    assert a != task_set_hash([("q1", ["1"]), ("q2", ["3"])])


def test_nothing_evaluated_is_an_error() -> None:
    with pytest.raises(ValueError):
        summarise([])
    assert not math.isnan(mean_interval([1.0])[0])


def test_the_proportional_sample_keeps_each_kinds_share_and_spreads_over_its_tasks() -> None:
    from streamgrpo.evaluation.core import proportional_sample

    # builtin:heldout's shape: 40 / 22 / 22 / 10, interleaved kind by kind
    kinds = (["arithmetic", "lookup", "two_step", "history"] * 10 + ["arithmetic", "lookup", "two_step"] * 12
             + ["arithmetic"] * 18)
    chosen = proportional_sample(kinds, 32)
    assert chosen == sorted(set(chosen)) and len(chosen) == 32
    counts = {k: sum(kinds[i] == k for i in chosen) for k in ("arithmetic", "lookup", "two_step", "history")}
    assert counts == {"arithmetic": 14, "lookup": 8, "two_step": 7, "history": 3}, counts
    arithmetic = [i for i, k in enumerate(kinds) if k == "arithmetic"]
    assert [i for i in chosen if kinds[i] == "arithmetic"][-1] >= arithmetic[len(arithmetic) * 13 // 14], \
        "spread over the kind's tasks, not its first 14"
    assert proportional_sample(kinds, 500) == list(range(len(kinds)))


def test_a_small_kind_keeps_one_task_and_the_sample_never_exceeds_its_size() -> None:
    from streamgrpo.evaluation.core import proportional_sample

    assert proportional_sample(["a"] * 10 + ["b"], 3) == [0, 5, 10]
    assert proportional_sample(["a"] * 30 + ["b", "c", "d"], 4) == [0, 30, 31, 32]
    assert proportional_sample(["a", "b", "c"], 2) == [0, 1], "fewer slots than kinds: the kinds seen first"
    assert proportional_sample([""] * 5, 2) == [0, 2], "tasks without a kind are one kind"
