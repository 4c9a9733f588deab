"""A demonstration's group (one rollout) trains by likelihood when its answer is correct, and never otherwise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.streams.samples import build_sample, ready_rollouts
from streamgrpo.streams.window_core import (
    DEMONSTRATION,
    GroupState,
    WindowPolicy,
    add_completed,
    add_reward,
    maybe_close,
    new_state,
)

G = ids.group_id("demo-task")
RID = ids.rollout_id(G, 0)
SOURCE = "builtin-expert"
POLICY = WindowPolicy("grpo", build_estimator("grpo"), timeout_s=10.0, partial_policy="score", min_group_size=2)


def reward(score: float, status: R.RewardStatus = R.RewardStatus.OK, demo: str | None = SOURCE) -> R.Reward:
    return R.Reward(envelope=R.Envelope.new("judge", event_id=ids.derived_id("reward", RID), task_id="demo-task",
                                            group_id=G, rollout_id=RID),
                    score=score, status=status, judge=R.JudgeInfo("correct", "h"), group_size=1, adapter_name="planner",
                    adapter_version=2, turns=2, rollout_status=R.RolloutStatus.ANSWERED, demo_source=demo)


def completed(demo: str | None = SOURCE) -> R.RolloutCompleted:
    return R.RolloutCompleted(envelope=R.Envelope.new("rollout", task_id="demo-task", group_id=G, rollout_id=RID),
                              question="q", source="builtin", final_answer="42", turns=2,
                              status=R.RolloutStatus.ANSWERED, group_size=1, adapter_name="planner", adapter_version=2,
                              duration_ms=5, demo_source=demo)


def action(turn: int) -> R.PlannerAction:
    return R.PlannerAction(R.Envelope.new("rollout", group_id=G, rollout_id=RID, turn=turn), [1, 2], "a", [7, 8],
                           [0.0, 0.0], "planner", 2, R.SamplingParams(0.7, 1.0, 48), R.ParseStatus.STRICT, "h", 0,
                           engine="demonstration", demo_source=SOURCE)


def fresh() -> GroupState:
    return new_state(G, "demo-task", 1, now=0.0, partition=0)


@pytest.mark.parametrize("completion_first", [True, False])
def test_a_correct_demonstration_trains_with_the_likelihood_weight(completion_first: bool) -> None:
    s = fresh()
    if completion_first:
        s = add_completed(s, completed())
    s, accepted = add_reward(s, reward(1.0))
    assert accepted
    s, closed = maybe_close(s, POLICY, now=1.0)  # a group of one: no variance, and it still trains
    assert closed is not None and closed.trains and closed.reason == DEMONSTRATION and closed.samples == 1
    if not completion_first:
        s = add_completed(s, completed())
    assert ready_rollouts(s, lambda r, t: True) == [RID]
    sample = build_sample(s, RID, [action(2), action(1)])
    assert (sample.advantage, sample.demo_source, sample.reward) == (1.0, SOURCE, 1.0)


@pytest.mark.parametrize("bad", [reward(0.0), reward(0.0, R.RewardStatus.ERROR)])
def test_a_wrong_or_failed_demonstration_never_trains(bad: R.Reward) -> None:
    s, _ = add_reward(add_completed(fresh(), completed()), bad)
    s, closed = maybe_close(s, POLICY, now=1.0)
    assert closed is not None and not closed.trains and closed.samples == 0
    assert closed.reason == "demonstration_rejected"
    assert ready_rollouts(s, lambda r, t: True) == []


def test_a_policy_group_of_one_still_does_not_train() -> None:
    s, _ = add_reward(add_completed(fresh(), completed(demo=None)), reward(1.0, demo=None))
    s, closed = maybe_close(s, POLICY, now=1.0)
    assert closed is not None and not closed.trains and closed.reason == "zero_variance"


def test_the_demonstration_survives_the_state_round_trip() -> None:
    s = add_completed(fresh(), completed())
    assert GroupState.from_dict(s.to_dict()).demo_source == SOURCE
    old = s.to_dict()
    del old["demo_source"]  # a state stored before demonstrations existed
    assert replace(GroupState.from_dict(old)).demo_source is None
