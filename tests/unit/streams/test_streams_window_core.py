"""Group window state machine and sample readiness (pure)."""

from __future__ import annotations

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.streams.samples import build_sample, ready_rollouts
from streamgrpo.streams.window_core import (
    GroupState,
    WindowPolicy,
    add_completed,
    add_reward,
    expired,
    maybe_close,
    new_state,
    wants_action,
)

G = ids.group_id("task-1")


def policy(partial: str = "score", min_size: int = 2, est: str = "grpo") -> WindowPolicy:
    return WindowPolicy(est, build_estimator(est), timeout_s=10.0, partial_policy=partial, min_group_size=min_size)


def reward(i: int, score: float, status: R.RewardStatus = R.RewardStatus.OK, n: int = 4) -> R.Reward:
    rid = ids.rollout_id(G, i)
    return R.Reward(
        envelope=R.Envelope.new("judge", event_id=ids.derived_id("reward", rid), task_id="task-1", group_id=G, rollout_id=rid),
        score=score, status=status, judge=R.JudgeInfo("math", "h"), group_size=n, adapter_name="planner",
        adapter_version=3, turns=2, rollout_status=R.RolloutStatus.ANSWERED,
    )


def completed(i: int, turns: int, n: int = 4) -> R.RolloutCompleted:
    rid = ids.rollout_id(G, i)
    return R.RolloutCompleted(
        envelope=R.Envelope.new("rollout", task_id="task-1", group_id=G, rollout_id=rid), question="q", source="s",
        final_answer="a", turns=turns, status=R.RolloutStatus.ANSWERED, group_size=n, adapter_name="planner",
        adapter_version=3, duration_ms=5,
    )


def fresh() -> GroupState:
    return new_state(G, "task-1", 4, now=100.0, partition=1)


def test_complete_group_closes_with_advantages() -> None:
    s = fresh()
    for i, sc in enumerate([1.0, 0.0, 0.5, 0.5]):
        s, ok = add_reward(s, reward(i, sc))
        assert ok
        s2, closed = maybe_close(s, policy(), now=101.0)
        assert (closed is None) == (i < 3)
    s, closed = s2, closed
    assert closed is not None and closed.status == R.GroupStatus.COMPLETE and closed.trains
    assert closed.envelope.event_id == ids.group_closed_id(G) and closed.missing_rollout_ids == []
    assert closed.reward_mean == pytest.approx(0.5) and closed.adapter_version == 3
    assert s.advantages[ids.rollout_id(G, 0)] > 0 > s.advantages[ids.rollout_id(G, 1)]


def test_duplicate_reward_dropped() -> None:
    s, _ = add_reward(fresh(), reward(0, 1.0))
    s, ok = add_reward(s, reward(0, 1.0))
    assert not ok and len(s.rewards) == 1


def test_zero_variance_group_does_not_train() -> None:
    s = fresh()
    for i in range(4):
        s, _ = add_reward(s, reward(i, 1.0))
    s, closed = maybe_close(s, policy(), now=100.0)
    assert closed is not None and not closed.trains and closed.reason == "zero_variance"
    assert ready_rollouts(s, lambda r, t: True) == []


def test_error_rewards_complete_but_get_no_advantage() -> None:
    s = fresh()
    for i, sc in enumerate([1.0, 0.0, 0.0]):
        s, _ = add_reward(s, reward(i, sc))
    s, _ = add_reward(s, reward(3, 0.0, R.RewardStatus.ERROR))
    s, closed = maybe_close(s, policy(), now=100.0)
    assert closed is not None and closed.status == R.GroupStatus.COMPLETE and closed.received == 4
    assert closed.trains and ids.rollout_id(G, 3) not in s.advantages and s.size == 3


@pytest.mark.parametrize("partial,trains", [("score", True), ("drop", False)])
def test_timeout_follows_policy_and_lists_missing(partial: str, trains: bool) -> None:
    s = fresh()
    s, _ = add_reward(s, reward(0, 1.0))
    s, _ = add_reward(s, reward(2, 0.0))
    s, closed = maybe_close(s, policy(partial), now=105.0)
    assert closed is None
    s, closed = maybe_close(s, policy(partial), now=110.0)
    assert closed is not None and closed.status == R.GroupStatus.TIMED_OUT and closed.trains is trains
    assert closed.missing_rollout_ids == [ids.rollout_id(G, 1), ids.rollout_id(G, 3)]
    assert closed.received == 2
    assert sorted(s.advantages) == (sorted([ids.rollout_id(G, 0), ids.rollout_id(G, 2)]) if trains else [])


def test_timeout_with_too_few_rewards_does_not_train() -> None:
    s, _ = add_reward(fresh(), reward(0, 1.0))
    s, closed = maybe_close(s, policy("score", min_size=2), now=200.0)
    assert closed is not None and not closed.trains and closed.reason == "too_few_rewards"


def test_sample_waits_for_every_turn_and_carries_all() -> None:
    s = fresh()
    r0 = ids.rollout_id(G, 0)
    arrived: set[tuple[str, int]] = {(r0, 2)}

    def has_turn(r: str, t: int) -> bool:
        return (r, t) in arrived

    for i, sc in enumerate([1.0, 0.0, 0.0, 0.0]):
        s, _ = add_reward(s, reward(i, sc))
    s, _ = maybe_close(s, policy(), now=100.0)
    assert wants_action(s, r0)
    assert r0 not in ready_rollouts(s, has_turn)  # turn count unknown
    s = add_completed(s, completed(0, turns=3))
    assert r0 not in ready_rollouts(s, has_turn)  # 1 of 3 turns
    arrived.add((r0, 1))
    assert r0 not in ready_rollouts(s, has_turn)
    arrived.add((r0, 3))
    assert ready_rollouts(s, has_turn) == [r0]
    sampling = R.SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=32)
    turns = [R.PlannerAction(R.Envelope.new("rollout", group_id=G, rollout_id=r0, turn=t), [t, t], "a", [10 + t], [-0.5],
                             "planner", 3, sampling, R.ParseStatus.STRICT, "h", 1) for t in (3, 1, 2)]
    sample = build_sample(s, r0, turns)  # the stored events themselves: no intermediate shape
    assert [t.turn for t in sample.turns] == [1, 2, 3]
    assert [(t.prompt_token_ids, t.action_token_ids) for t in sample.turns] == [([t, t], [10 + t]) for t in (1, 2, 3)]
    assert sample.envelope.event_id == ids.sample_id(r0) and sample.behaviour_version == 3
    assert sample.advantage == s.advantages[r0] and sample.reward == 1.0 and sample.group_size == 4
    s.emitted.append(r0)
    assert ready_rollouts(s, has_turn) == [] and not wants_action(s, r0)


def test_actions_of_untrainable_rollout_not_wanted_after_close() -> None:
    s = fresh()
    assert wants_action(s, ids.rollout_id(G, 0))  # open group: keep everything
    for i in range(4):
        s, _ = add_reward(s, reward(i, 0.0))
    s, _ = maybe_close(s, policy(), now=100.0)
    assert not wants_action(s, ids.rollout_id(G, 0))


def test_state_roundtrips_through_dict() -> None:
    s, _ = add_reward(fresh(), reward(0, 1.0))
    s = add_completed(s, completed(0, turns=2))
    assert GroupState.from_dict(s.to_dict()) == s


def test_closed_group_expires_after_ttl() -> None:
    s = fresh()
    assert not expired(s, now=10_000.0, ttl_s=60)  # open groups time out, they do not expire
    for i in range(4):
        s, _ = add_reward(s, reward(i, float(i)))
    s, _ = maybe_close(s, policy(), now=100.0)
    assert not expired(s, now=159.0, ttl_s=60) and expired(s, now=160.0, ttl_s=60)


def test_inputs_beyond_the_bounds_are_rejected_before_they_size_the_work() -> None:
    from streamgrpo.streams.window_core import out_of_bounds

    assert out_of_bounds(reward(0, 1.0)) is None and out_of_bounds(completed(0, turns=3)) is None
    huge = R.Reward(R.Envelope.new("judge", group_id=G, rollout_id="r"), 1.0, R.RewardStatus.OK,
                    R.JudgeInfo("m", "h"), 10**9, "planner", 0, 1, R.RolloutStatus.ANSWERED)
    assert "group_size 1000000000" in (out_of_bounds(huge) or "")
    assert "turn count 100000" in (out_of_bounds(completed(0, turns=100_000)) or "")


def test_sample_carries_the_planner_actions_sampling_parameters() -> None:
    """The sampling parameters of the PlannerActions reach the TrainingSample."""
    s = fresh()
    for i, sc in enumerate([1.0, 0.0, 0.5, 0.5]):
        s, _ = add_reward(s, reward(i, sc))
        s = add_completed(s, completed(i, turns=1))
    s, _ = maybe_close(s, policy(), now=101.0)
    r0 = ids.rollout_id(G, 0)
    sampling = R.SamplingParams(temperature=0.7, top_p=0.95, max_new_tokens=64, seed=11)
    action = R.PlannerAction(
        envelope=R.Envelope.new("rollout", task_id="task-1", group_id=G, rollout_id=r0, turn=1),
        prompt_token_ids=[1, 2], action_text="{}", action_token_ids=[3], behaviour_logprobs=[-0.2],
        adapter_name="planner", adapter_version=3, sampling=sampling, parse_status=R.ParseStatus.STRICT,
        prompt_hash="h", latency_ms=1)
    assert build_sample(s, r0, [action]).sampling == sampling


def human(i: int, score: float, by: str = "ada") -> R.Reward:
    rid = ids.rollout_id(G, i)
    return R.Reward(
        envelope=R.Envelope.new("label", event_id=ids.human_reward_id(rid, by, score), task_id="task-1", group_id=G,
                                rollout_id=rid),
        score=score, status=R.RewardStatus.OK, judge=R.JudgeInfo(f"human:{by}", "manual"), group_size=4,
        adapter_name="planner", adapter_version=3, turns=2, rollout_status=R.RolloutStatus.ANSWERED,
    )


def test_a_human_reward_overrides_the_judge_while_the_group_is_open() -> None:
    s, _ = add_reward(fresh(), reward(0, 0.0))
    s, ok = add_reward(s, human(0, 1.0))
    assert ok and s.rewards[ids.rollout_id(G, 0)].score == 1.0 and s.rewards[ids.rollout_id(G, 0)].human
    s, ok = add_reward(s, human(0, 1.0))  # the same label again: a duplicate
    assert not ok
    s, ok = add_reward(s, human(0, 0.5, by="bob"))  # a later human label replaces the earlier one
    assert ok and s.rewards[ids.rollout_id(G, 0)].score == 0.5
    s, ok = add_reward(s, human(1, 1.0))  # before the judge: the judge's reward then does not count
    assert ok
    s, ok = add_reward(s, reward(1, 0.0))
    assert not ok and s.rewards[ids.rollout_id(G, 1)].score == 1.0
    for i in (2, 3):
        s, _ = add_reward(s, reward(i, 0.0))
    s, closed = maybe_close(s, policy(), now=101.0)
    assert closed is not None and closed.reward_mean == pytest.approx(0.375)  # (0.5 + 1 + 0 + 0) / 4
    late, ok = add_reward(s, human(2, 1.0))  # the group closed: a label changes nothing
    assert not ok and late is s
    assert GroupState.from_dict(s.to_dict()) == s


def held(seconds: float) -> WindowPolicy:
    return WindowPolicy("grpo", build_estimator("grpo"), timeout_s=10.0, partial_policy="score", min_group_size=2,
                        review_hold_s=seconds)


def test_a_review_hold_keeps_a_complete_group_open_for_a_label_that_then_changes_the_advantages() -> None:
    s = fresh()
    for i, sc in enumerate([1.0, 0.0, 0.0, 0.0]):
        s, _ = add_reward(s, reward(i, sc))
    s, closed = maybe_close(s, held(30.0), now=105.0)  # complete at 105: the hold starts, the group stays open
    assert closed is None and s.complete_at == 105.0 and not s.closed
    s, closed = maybe_close(s, held(30.0), now=134.0)
    assert closed is None  # 29 s into a 30 s hold (and past the 10 s group timeout: a complete group never times out)
    s, ok = add_reward(s, human(1, 1.0))  # a person says rollout 1 was right after all
    assert ok
    s, closed = maybe_close(s, held(30.0), now=135.0)
    assert closed is not None and closed.status == R.GroupStatus.COMPLETE and closed.trains
    want = build_estimator("grpo")([1.0, 1.0, 0.0, 0.0]).advantages
    assert [s.advantages[ids.rollout_id(G, i)] for i in range(4)] == pytest.approx(want)
    # without the hold the same group closes at once on the judge's rewards
    t = fresh()
    for i, sc in enumerate([1.0, 0.0, 0.0, 0.0]):
        t, _ = add_reward(t, reward(i, sc))
    t, closed = maybe_close(t, policy(), now=105.0)
    assert closed is not None and t.advantages[ids.rollout_id(G, 1)] < 0


def test_the_review_hold_ends_early_once_every_usable_reward_is_a_persons() -> None:
    s = fresh()
    for i in range(4):
        s, _ = add_reward(s, human(i, float(i % 2)))
    s, closed = maybe_close(s, held(3600.0), now=101.0)
    assert closed is not None and closed.trains and s.complete_at is None
