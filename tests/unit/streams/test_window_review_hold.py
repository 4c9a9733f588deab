"""Issue 38, "the review hold applies to groups opened for review" (and issue 37: served groups are held by default).

The pure window (streams.window_core): a complete group whose rollouts `streamgrpo serve` answered to a client (its
RolloutCompleted's source is `mcp:<client>`) is held for `served_review_hold_s`; a training group is not held by it
and closes at once (only the operator's `review_hold_s` holds every group); a group of one whose judge reward comes
before its RolloutCompleted waits for it; a demonstration is not held.
"""

from __future__ import annotations

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.streams.config import StreamsSettings
from streamgrpo.streams.window_core import (
    GroupState,
    WindowPolicy,
    add_completed,
    add_reward,
    hold_over,
    maybe_close,
    new_state,
    review_hold,
)


def _policy(review_hold_s: float = 0.0, served_review_hold_s: float = 60.0) -> WindowPolicy:
    return WindowPolicy("grpo", build_estimator("grpo"), timeout_s=10.0, partial_policy="score", min_group_size=2,
                        review_hold_s=review_hold_s, served_review_hold_s=served_review_hold_s)


def _ids(task: str, i: int = 0) -> dict[str, str]:
    group = ids.group_id(task)
    return {"task_id": task, "group_id": group, "rollout_id": ids.rollout_id(group, i)}


def _done(task: str, i: int, size: int, source: str, demo: str | None = None) -> R.RolloutCompleted:
    return R.RolloutCompleted(envelope=R.Envelope.new("rollout", **_ids(task, i)), question="q", source=source,
                              final_answer="a", turns=1, status=R.RolloutStatus.ANSWERED, group_size=size,
                              adapter_name="planner", adapter_version=1, duration_ms=1, demo_source=demo)


def _reward(task: str, i: int, size: int, score: float, judge: str = "correct",
            status: R.RewardStatus = R.RewardStatus.OK, demo: str | None = None) -> R.Reward:
    env = _ids(task, i)
    return R.Reward(envelope=R.Envelope.new("judge", event_id=ids.derived_id("reward", env["rollout_id"], judge),
                                            **env),
                    score=score, status=status, judge=R.JudgeInfo(judge, "h"), group_size=size, adapter_name="planner",
                    adapter_version=1, turns=1, rollout_status=R.RolloutStatus.ANSWERED, demo_source=demo)


def _group(task: str, size: int) -> GroupState:
    return new_state(ids.group_id(task), task, size, now=100.0, partition=0)


def test_a_training_group_is_not_held_by_the_served_hold_and_closes_at_once() -> None:
    state = _group("train", 4)
    for i, score in enumerate([1.0, 0.0, 0.0, 0.0]):
        state = add_completed(state, _done("train", i, 4, source="gsm8k"))
        state, ok = add_reward(state, _reward("train", i, 4, score))
        assert ok
    assert state.served is False
    state, closed = maybe_close(state, _policy(served_review_hold_s=600.0), now=101.0)
    assert closed is not None and closed.trains and state.complete_at is None
    # the same training group of ONE rollout (a task submitted with group_size 1) is not held either
    one = add_completed(_group("train-one", 1), _done("train-one", 0, 1, source="support-bot"))
    one, _ = add_reward(one, _reward("train-one", 0, 1, 1.0))
    one, closed = maybe_close(one, _policy(served_review_hold_s=600.0), now=101.0)
    assert closed is not None


def test_a_served_group_is_held_until_the_clients_feedback_then_closes_with_it() -> None:
    policy = _policy(served_review_hold_s=60.0)
    state = add_completed(_group("served", 1), _done("served", 0, 1, source="mcp:alice"))
    assert state.served is True
    # the default judge cannot score a call without ground truth: an ERROR reward completes the group
    state, _ = add_reward(state, _reward("served", 0, 1, 0.0, status=R.RewardStatus.ERROR))
    state, closed = maybe_close(state, policy, now=101.0)
    assert closed is None and state.complete_at == 101.0  # held for review
    state, closed = maybe_close(state, policy, now=160.0)  # 59 s into a 60 s hold (past the 10 s group timeout)
    assert closed is None
    state, ok = add_reward(state, _reward("served", 0, 1, 0.75, judge="human:mcp:alice"))
    assert ok
    state, closed = maybe_close(state, policy, now=160.5)  # every usable reward is a person's: no need to wait
    assert closed is not None and closed.status == R.GroupStatus.COMPLETE and closed.reward_mean == 0.75
    assert not closed.trains  # a group of one has no variance: feedback is recorded, it does not train


def test_an_unlabelled_served_group_closes_when_its_hold_is_over() -> None:
    policy = _policy(served_review_hold_s=60.0)
    state = add_completed(_group("quiet", 1), _done("quiet", 0, 1, source="mcp:bob"))
    state, _ = add_reward(state, _reward("quiet", 0, 1, 1.0))
    state, closed = maybe_close(state, policy, now=101.0)
    assert closed is None
    hold = review_hold(policy, state.served, state.expected, state.demo_source)
    assert hold == 60.0 and not hold_over(state.complete_at, policy, 160.9, hold)
    assert hold_over(state.complete_at, policy, 161.0, hold)  # what the window's timer ticks the group for
    state, closed = maybe_close(state, policy, now=161.0)
    assert closed is not None and closed.reward_mean == 1.0


def test_a_group_of_one_whose_reward_comes_first_waits_for_its_rollout_to_say_where_it_came_from() -> None:
    policy = _policy(served_review_hold_s=60.0)
    # the judge's reward reaches the window before the RolloutCompleted (another topic): provenance unknown
    served, _ = add_reward(_group("early-served", 1), _reward("early-served", 0, 1, 0.0))
    served, closed = maybe_close(served, policy, now=101.0)
    assert closed is None and served.served is None
    served = add_completed(served, _done("early-served", 0, 1, source="mcp:alice"))
    served, closed = maybe_close(served, policy, now=102.0)
    assert closed is None  # a served call: held for its client's feedback
    training, _ = add_reward(_group("early-train", 1), _reward("early-train", 0, 1, 0.0))
    training, closed = maybe_close(training, policy, now=101.0)
    assert closed is None
    training = add_completed(training, _done("early-train", 0, 1, source="gsm8k"))
    training, closed = maybe_close(training, policy, now=101.5)
    assert closed is not None  # a training group: closes as soon as it is known to be one
    # a larger group is never held on an unknown provenance (it is a training group unless its rollouts say so)
    big = _group("early-big", 2)
    for i in range(2):
        big, _ = add_reward(big, _reward("early-big", i, 2, float(i)))
    big, closed = maybe_close(big, policy, now=101.0)
    assert closed is not None and closed.trains


def test_a_demonstration_is_not_held_by_the_served_hold() -> None:
    demo = add_completed(_group("demo", 1), _done("demo", 0, 1, source="demos", demo="demos.jsonl"))
    demo, _ = add_reward(demo, _reward("demo", 0, 1, 1.0, demo="demos.jsonl"))
    demo, closed = maybe_close(demo, _policy(served_review_hold_s=600.0), now=101.0)
    assert closed is not None and closed.trains and closed.reason == "demonstration"
    early, _ = add_reward(_group("demo-early", 1), _reward("demo-early", 0, 1, 1.0, demo="demos.jsonl"))
    early, closed = maybe_close(early, _policy(served_review_hold_s=600.0), now=101.0)
    assert closed is not None and closed.reason == "demonstration"
    # `label --as-demo` of a served answer: the demonstration's Task keeps the served call's source (mcp:<client>)
    label = "label:r1:ada"
    served_demo = add_completed(_group("demo-served", 1), _done("demo-served", 0, 1, source="mcp:alice", demo=label))
    assert served_demo.served is True
    served_demo, _ = add_reward(served_demo, _reward("demo-served", 0, 1, 1.0, demo=label))
    served_demo, closed = maybe_close(served_demo, _policy(served_review_hold_s=600.0), now=101.0)
    assert closed is not None and closed.trains and closed.reason == "demonstration"


@pytest.mark.parametrize(("review", "served", "training_hold", "served_hold"),
                         [(0.0, 60.0, 0.0, 60.0), (30.0, 0.0, 30.0, 30.0), (120.0, 60.0, 120.0, 120.0),
                          (30.0, 60.0, 30.0, 60.0), (0.0, 0.0, 0.0, 0.0)])
def test_review_hold_s_still_holds_every_group_and_the_longer_hold_applies(
        review: float, served: float, training_hold: float, served_hold: float) -> None:
    policy = _policy(review_hold_s=review, served_review_hold_s=served)
    assert review_hold(policy, False, 4, None) == training_hold
    assert review_hold(policy, True, 1, None) == served_hold
    assert review_hold(policy, None, 1, None) == served_hold
    assert review_hold(policy, None, 4, None) == training_hold
    assert review_hold(policy, None, 1, "demos.jsonl") == training_hold
    assert review_hold(policy, True, 1, "label:r1:ada") == training_hold


def test_served_groups_are_held_by_default_and_training_groups_are_not() -> None:
    s = StreamsSettings()
    assert s.review_hold_s == 0.0 and s.served_review_hold_s > 0
    policy = WindowPolicy(s.estimator, build_estimator(s.estimator), s.group_timeout_s, s.partial_policy,
                          s.min_group_size, s.review_hold_s, s.served_review_hold_s)
    assert review_hold(policy, True, 1, None) == s.served_review_hold_s and review_hold(policy, False, 8, None) == 0


def test_the_provenance_is_stored_and_an_older_stored_state_restores_without_it() -> None:
    state = add_completed(_group("stored", 1), _done("stored", 0, 1, source="mcp:alice"))
    assert GroupState.from_dict(state.to_dict()) == state and state.to_dict()["served"] is True
    older = {k: v for k, v in _group("old", 1).to_dict().items() if k != "served"}
    assert GroupState.from_dict(older).served is None
