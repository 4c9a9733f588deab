"""Advantage estimators against hand-computed values."""

from __future__ import annotations

import math

import pytest

from streamgrpo.streams.advantages import ESTIMATORS, build_estimator
from streamgrpo.streams.errors import StreamsConfigError


def test_grpo_hand_computed() -> None:
    # rewards 1, 0, 0, 1 -> mean 0.5, population std 0.5 -> +-1 (minus eps)
    res = build_estimator("grpo")([1.0, 0.0, 0.0, 1.0])
    assert res.mean == 0.5 and res.std == 0.5 and not res.zero_variance
    for got, want in zip(res.advantages, [1.0, -1.0, -1.0, 1.0], strict=True):
        assert got == pytest.approx(want * 0.5 / (0.5 + 1e-6), abs=1e-12)


def test_grpo_three_values() -> None:
    # rewards 0, 1, 2: mean 1, std sqrt(2/3)
    res = build_estimator("grpo")([0.0, 1.0, 2.0])
    std = math.sqrt(2 / 3)
    assert res.advantages == pytest.approx((-1 / (std + 1e-6), 0.0, 1 / (std + 1e-6)))


def test_dr_grpo_hand_computed() -> None:
    res = build_estimator("dr_grpo")([0.2, 0.4, 0.9])
    assert res.advantages == pytest.approx((0.2 - 0.5, 0.4 - 0.5, 0.9 - 0.5))


def test_rloo_hand_computed() -> None:
    # r = [1, 0, 0, 0]: A_0 = 1 - 0 = 1; A_1 = 0 - 1/3
    res = build_estimator("rloo")([1.0, 0.0, 0.0, 0.0])
    assert res.advantages == pytest.approx((1.0, -1 / 3, -1 / 3, -1 / 3))
    # identity: rloo = n/(n-1) * (r - mean)
    r = [0.3, 0.9, 0.1, 0.5, 0.7]
    mean = sum(r) / 5
    assert build_estimator("rloo")(r).advantages == pytest.approx(tuple(5 / 4 * (x - mean) for x in r))


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_zero_variance_detected(name: str) -> None:
    res = build_estimator(name)([0.7, 0.7, 0.7])
    assert res.zero_variance and res.advantages == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_advantage_is_per_trajectory_not_per_turn(name: str) -> None:
    """A 1-turn and a 5-turn rollout with equal rewards get equal advantages, and every turn of a
    rollout gets its trajectory's advantage (turn count never enters the estimator)."""
    from streamgrpo.avro import ids
    from streamgrpo.avro import records as R
    from streamgrpo.streams.samples import build_sample
    from streamgrpo.streams.window_core import GroupState, RewardEntry

    rewards = {"short": 1.0, "long": 1.0, "bad": 0.0}
    res = build_estimator(name)(list(rewards.values()))
    adv = dict(zip(rewards, res.advantages, strict=True))
    assert adv["short"] == adv["long"] != adv["bad"]
    state = GroupState(
        group_id="g", task_id="t", expected=3, first_seen=0.0, partition=0,
        rewards={k: RewardEntry(ids.derived_id("r", k), v, True, "planner", 0) for k, v in rewards.items()},
        closed=True, trains=True, advantages=adv, mean=res.mean, std=res.std, size=3, estimator=name,
    )
    turns = {"short": 1, "long": 5}
    samples = {
        k: build_sample(state, k, [R.PlannerAction(R.Envelope.new("r", rollout_id=k, turn=t), [t], "a", [t], [-0.1],
                                                   "planner", 0, R.SamplingParams(), R.ParseStatus.STRICT, "h", 1)
                                   for t in range(1, n + 1)])
        for k, n in turns.items()
    }
    assert [len(s.turns) for s in samples.values()] == [1, 5]
    assert samples["short"].advantage == samples["long"].advantage == adv["short"]
    assert isinstance(samples["long"], R.TrainingSample)


def test_unknown_estimator_is_a_clear_error() -> None:
    with pytest.raises(StreamsConfigError, match="grpo"):
        build_estimator("ppo")


def test_non_finite_rewards_rejected() -> None:
    with pytest.raises(ValueError):
        build_estimator("grpo")([1.0, float("nan")])
