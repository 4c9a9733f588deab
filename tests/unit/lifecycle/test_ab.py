"""The A/B decision core (pure): mSPRT, guardrails, maximum duration, approval and eval gates."""

from __future__ import annotations

import math
import random

import pytest

from streamgrpo.lifecycle.ab import ABInput, ABPolicy, arm_variance, decide, guardrail, msprt
from streamgrpo.lifecycle.stats import Arm, VersionStats


def arm(outcomes: list[float]) -> Arm:
    return Arm.of(outcomes)


def inp(canary: list[float], control: list[float], age_s: float = 0.0, canary_counts: VersionStats | None = None,
        control_counts: VersionStats | None = None, **evals: float) -> ABInput:
    return ABInput(arm(canary), arm(control), canary_counts or VersionStats(), control_counts or VersionStats(),
                     age_s, evals.get("cand"), evals.get("prim"))


def test_variance_is_shrunk_towards_the_bernoulli_bound_and_never_zero() -> None:
    assert arm_variance(arm([0.0] * 3)) > 0  # all failures: still uncertain
    assert arm_variance(arm([])) == pytest.approx(0.25)
    many = arm([0.0, 1.0] * 500)
    assert arm_variance(many) == pytest.approx(0.25, abs=0.01)
    assert arm_variance(arm([0.5] * 1000)) < 0.01  # group means near 0.5 with no spread


def test_msprt_statistic_matches_the_closed_form() -> None:
    c, p = arm([1.0, 0.0, 1.0, 1.0]), arm([0.0, 0.0, 1.0, 0.0])
    stats = msprt(c, p, 0.2)
    v = arm_variance(c) / 4 + arm_variance(p) / 4
    expected = 0.5 * math.log(v / (v + 0.04)) + 0.04 * 0.25 / (2 * v * (v + 0.04))
    assert stats.log_lr == pytest.approx(expected) and stats.estimate == pytest.approx(0.5)
    assert stats.p_value == pytest.approx(min(1.0, math.exp(-expected))) and 0.5 < stats.p_better < 1
    with pytest.raises(ValueError):
        msprt(arm([]), p, 0.2)


def test_clearly_better_promotes_clearly_worse_rolls_back_and_equal_waits() -> None:
    policy = ABPolicy(alpha=0.05, mde=0.2, min_groups=4)
    better = decide(inp([1.0] * 12, [0.0, 0.25] * 6), policy)
    assert (better.action, better.verdict) == ("promote", "better") and better.metrics["p_value"] < 0.05
    worse = decide(inp([0.0] * 12, [1.0, 0.75] * 6), policy)
    assert (worse.action, worse.verdict) == ("rollback", "worse")
    equal = decide(inp([0.25, 0.5] * 6, [0.5, 0.25] * 6), policy)
    assert equal.action == "wait" and "p " in equal.reason
    early = decide(inp([1.0] * 3, [0.0] * 3), policy)
    assert early.action == "wait" and "need 4 groups" in early.reason


def test_maximum_duration_hands_over_unless_the_estimate_is_worse_than_max_loss() -> None:
    policy = ABPolicy(min_groups=4, max_groups=10, max_duration_s=100, max_loss=0.05)
    tie = decide(inp([0.25, 0.5] * 5, [0.5, 0.25] * 5), policy)
    assert (tie.action, tie.verdict) == ("promote", "not_worse") and "maximum duration" in tie.reason
    slightly_worse = decide(inp([0.25, 0.5] * 2, [0.5, 0.5] * 2, age_s=100), policy)
    assert (slightly_worse.action, slightly_worse.verdict) == ("restart", "worse_estimate")
    no_control = decide(inp([0.5] * 2, [], age_s=101), policy)  # no evidence either way: the line is handed over
    assert no_control.action == "promote"


def test_guardrails_need_a_minimum_count_a_limit_and_a_margin_over_the_primary() -> None:
    policy = ABPolicy()
    broken = VersionStats(rewards=8, rollout_errors=5)
    assert "error rate 0.62" in (guardrail(broken, VersionStats(rewards=100), policy.guardrails) or "")
    assert guardrail(VersionStats(rewards=7, rollout_errors=7), VersionStats(), policy.guardrails) is None
    assert guardrail(broken, VersionStats(rewards=10, rollout_errors=5), policy.guardrails) is None  # same as primary
    parse = VersionStats(actions=40, parse_failures=36)
    assert "parse_failure" in (guardrail(parse, VersionStats(actions=40, parse_failures=20), policy.guardrails) or "")
    tripped = decide(inp([1.0] * 2, [0.0] * 2, canary_counts=broken), policy)  # before any test could decide
    assert (tripped.action, tripped.verdict) == ("rollback", "guardrail")


def test_approval_and_eval_gates_hold_promotions_but_never_rollbacks() -> None:
    better, worse = ([1.0] * 12, [0.0, 0.25] * 6), ([0.0] * 12, [1.0, 0.75] * 6)
    gated = ABPolicy(mde=0.2, require_approval=True)
    assert decide(inp(*better), gated).action == "await_approval"
    assert decide(inp(*worse), gated).action == "rollback"
    evals = ABPolicy(mde=0.2, eval_gate=0.05)
    assert decide(inp(*better), evals).action == "wait"
    assert decide(inp(*better, cand=0.30, prim=0.32), evals).action == "promote"
    held = decide(inp(*better, cand=0.20, prim=0.32), evals)
    assert (held.action, held.verdict) == ("restart", "held_out_worse")


def test_false_decisions_under_equal_arms_stay_below_alpha_in_a_small_simulation() -> None:
    """200 runs of 80 groups (the benchmark runs 1,000 per scenario): a smoke check of the stated error rate."""
    rng = random.Random(7)
    policy = ABPolicy(alpha=0.05, mde=0.1, min_groups=4, max_groups=10**9, max_duration_s=1e12)
    decided = 0
    for _ in range(200):
        c: list[float] = []
        p: list[float] = []
        for _ in range(80):
            x = sum(rng.random() < 0.3 for _ in range(4)) / 4
            (c if rng.random() < 0.5 else p).append(x)
            if decide(inp(c, p), policy).action != "wait":
                decided += 1
                break
    assert decided / 200 <= 0.05
