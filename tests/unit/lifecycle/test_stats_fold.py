"""The fold over the log per adapter version (lifecycle/stats.py ``Stats``, pure): judge vs human rewards, group
outcomes, failures, evaluations."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from support.streams import synthetic_group

from streamgrpo.avro import records as R
from streamgrpo.lifecycle.stats import Stats, is_human

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def at(event: R.Event, seconds: float) -> R.Event:
    from dataclasses import replace

    return replace(event, envelope=replace(event.envelope, event_time=T0 + timedelta(seconds=seconds)))


def human(reward: R.Reward, score: float) -> R.Reward:
    from dataclasses import replace

    return replace(reward, envelope=R.Envelope.new("label", group_id=reward.envelope.group_id,
                                                   rollout_id=reward.envelope.rollout_id),
                   judge=R.JudgeInfo("human:ada", "manual"), score=score)


def test_group_outcome_is_the_success_share_once_every_rollout_is_judged() -> None:
    stats = Stats(success_threshold=0.5)
    g = synthetic_group("t1", [1.0, 0.0, 0.6, 0.2], version=3)
    for i, r in enumerate(g.rewards[:3]):
        stats.apply(at(r, i))
    assert stats.of("planner", 3).groups == 0 and len(stats.open) == 1
    stats.apply(at(g.rewards[3], 10))
    s = stats.of("planner", 3)
    assert s.outcomes == [(int((T0 + timedelta(seconds=10)).timestamp() * 1000), 0.5)]
    assert (s.rewards, s.ok, s.successes) == (4, 4, 2) and s.reward_mean == 0.45 and s.success_rate == 0.5
    assert stats.arm("planner", [3], 0).n == 1 and stats.arm("planner", [3], 10**15).n == 0


def test_duplicates_errors_and_human_rewards_are_kept_apart() -> None:
    stats = Stats()
    g = synthetic_group("t2", [1.0, 1.0, 0.0, 0.0], version=1, errors=[3])
    rewards = [*g.rewards, g.rewards[0]]  # a redelivery
    from dataclasses import replace

    rewards[2] = replace(rewards[2], rollout_status=R.RolloutStatus.ERROR, status=R.RewardStatus.ERROR)
    label = human(g.rewards[2], 1.0)
    assert is_human(label) and not is_human(g.rewards[2])
    for r in [label, *rewards]:
        stats.apply(r)
    s = stats.of("planner", 1)
    assert (s.rewards, s.ok, s.rollout_errors, s.judge_failures) == (4, 2, 1, 1)
    assert (s.human, s.human_mean) == (1, 1.0)
    assert s.outcomes[0][1] == 0.5  # the human's 1.0 is not in the judge outcome
    assert s.rate("rollout_errors") == 0.25


def test_parse_failures_timeouts_and_latest_evaluation() -> None:
    stats = Stats()
    g = synthetic_group("t3", [1.0, 0.0, None, None], version=2, group_size=4)
    for a in g.actions[:4]:
        stats.apply(a)
    from dataclasses import replace

    stats.apply(replace(g.actions[4], parse_status=R.ParseStatus.FAILED))
    for r in g.rewards:
        stats.apply(r)
    assert stats.of("planner", 2).groups == 0
    closed = R.GroupClosed(R.Envelope.new("streams", group_id=g.group_id), R.GroupStatus.TIMED_OUT, 4, 2, 0.5, 0.5,
                           "grpo", True, "timed_out_scored", 2)
    stats.apply(closed)
    s = stats.of("planner", 2)
    assert s.outcomes[0][1] == 0.5 and (s.actions, s.parse_failures) == (5, 1)
    evaluation = R.EvaluationCompleted(R.Envelope.new("eval"), "planner", 4, "builtin:heldout", "h", 10, 1, 0.0,
                                       0.4, 0.3, 0.5, 1.0, 0.0, 1.0, 2.0, 30.0, 5.0, R.JudgeInfo("correctness", "h"))
    later = replace(evaluation, envelope=replace(evaluation.envelope, event_id="e2",
                                                 event_time=evaluation.envelope.event_time + timedelta(hours=1)),
                    accuracy=0.9)
    stats.apply(later)
    stats.apply(evaluation)
    assert stats.of("planner", 4).evaluation.accuracy == 0.9
