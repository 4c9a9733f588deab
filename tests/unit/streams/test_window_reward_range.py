"""The window's fold refuses a reward whose score is not finite, a person's outside [0, 1] (issue 38, findings 5
and 6): such a Reward is not accepted, and a group under a review hold still closes on the judge's rewards."""

from __future__ import annotations

import math

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.streams.window_core import (
    GroupState,
    WindowPolicy,
    add_reward,
    maybe_close,
    new_state,
    reward_problem,
)

G = ids.group_id("task-range")


def _reward(i: int, score: float, judge: str = "math", tag: str = "") -> R.Reward:
    rid = ids.rollout_id(G, i)
    return R.Reward(
        envelope=R.Envelope.new("judge", event_id=ids.derived_id("reward", rid, judge, tag), task_id="task-range",
                                group_id=G, rollout_id=rid),
        score=score, status=R.RewardStatus.OK, judge=R.JudgeInfo(judge, "h"), group_size=4, adapter_name="planner",
        adapter_version=1, turns=1, rollout_status=R.RolloutStatus.ANSWERED,
    )


def _judged() -> GroupState:
    state = new_state(G, "task-range", 4, now=100.0, partition=0)
    for i, score in enumerate([1.0, 0.0, 0.0, 0.0]):
        state, ok = add_reward(state, _reward(i, score))
        assert ok
    return state


HOLD = WindowPolicy("grpo", build_estimator("grpo"), timeout_s=600.0, partial_policy="score", min_group_size=2,
                    review_hold_s=5.0)


@pytest.mark.parametrize("bad", [[(1, math.nan)], [(1, math.inf)], [(1, -math.inf)], [(1, -5.0)], [(1, 1.5)],
                                 [(1, 1e308), (2, -1e308)]])
def test_a_bad_human_score_is_refused_and_the_held_group_closes_on_the_judges_rewards(
        bad: list[tuple[int, float]]) -> None:
    state = _judged()
    for i, score in bad:
        human = _reward(i, score, judge="human:mallory", tag=repr(score))
        assert reward_problem(human) is not None
        state, accepted = add_reward(state, human)
        assert not accepted, score
    assert all(not e.human for e in state.rewards.values())
    state, closed = maybe_close(state, HOLD, now=101.0)  # the hold starts
    assert closed is None
    state, closed = maybe_close(state, HOLD, now=107.0)  # the hold is over: closes, no crash
    assert closed is not None and closed.trains and closed.reason == "complete"
    assert closed.reward_mean == pytest.approx(0.25)
    assert [state.advantages[ids.rollout_id(G, i)] for i in range(4)] == pytest.approx(
        build_estimator("grpo")([1.0, 0.0, 0.0, 0.0]).advantages)


def test_a_non_finite_judge_score_is_refused_but_a_hybrid_judges_range_is_kept() -> None:
    assert reward_problem(_reward(0, math.nan)) is not None
    assert reward_problem(_reward(0, 1e9)) is not None
    for score in (-0.5, 0.0, 1.0, 1.1):  # the hybrid judge is not clipped: its defaults give [-0.5, 1.1]
        assert reward_problem(_reward(0, score, judge="hybrid")) is None
    for score in (0.0, 0.5, 1.0):
        assert reward_problem(_reward(0, score, judge="human:ada")) is None
    state = new_state(G, "task-range", 4, now=100.0, partition=0)
    state, accepted = add_reward(state, _reward(0, math.nan))
    assert not accepted and state.rewards == {}


def test_a_valid_human_score_still_replaces_the_judges() -> None:
    state, accepted = add_reward(_judged(), _reward(1, 1.0, judge="human:ada"))
    assert accepted and state.rewards[ids.rollout_id(G, 1)].human


def _stored_by_an_older_release(state: GroupState, rollout: str, score: float) -> dict:
    """``state`` as an older release stored it: its reward of ``rollout`` replaced by a person's ``score`` (the
    intake of that release folded NaN and out-of-range human scores)."""
    d = state.to_dict()
    d["rewards"][rollout] = {**d["rewards"][rollout], "score": score, "human": True}
    return d


@pytest.mark.parametrize("score", [math.nan, math.inf, 7.0])
def test_a_group_stored_with_a_bad_score_by_an_older_release_is_repaired_on_load_and_closes(score: float) -> None:
    rollout = ids.rollout_id(G, 1)
    state, repaired = GroupState.restored(_stored_by_an_older_release(_judged(), rollout, score))
    assert rollout not in state.rewards and len(state.rewards) == 3  # as if it never arrived
    assert len(repaired) == 1 and repaired[0].startswith(f"reward of rollout {rollout} dropped: score")
    state, _ = add_reward(state, _reward(1, 0.0, tag="again"))  # the judge's reward of it is taken again
    state, closed = maybe_close(state, HOLD, now=101.0)
    state, closed = maybe_close(state, HOLD, now=107.0)
    assert closed is not None and closed.trains and closed.reward_mean == pytest.approx(0.25)
    assert all(math.isfinite(a) for a in state.advantages.values())


def test_a_closed_group_stored_with_non_finite_advantages_trains_nothing() -> None:
    state, closed = maybe_close(_judged(), WindowPolicy("grpo", build_estimator("grpo"), 600.0, "score", 2), 101.0)
    assert closed is not None and state.trains
    d = state.to_dict()
    d["advantages"] = {k: math.nan for k in d["advantages"]}
    d["std"] = math.nan
    restored, repaired = GroupState.restored(d)
    assert repaired == ["closed with a non-finite mean, std or advantage: trains nothing"]
    assert restored.closed and not restored.trains and restored.advantages == {}
    assert GroupState.restored(state.to_dict()) == (state, [])  # a sound state is loaded as stored
