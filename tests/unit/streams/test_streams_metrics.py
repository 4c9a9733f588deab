"""Reward metric windows (pure). The archive has its own tests under tests/unit/archive."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from streamgrpo.avro import records as R
from streamgrpo.lifecycle.stats import VersionStats
from streamgrpo.streams.metrics import RewardWindows


def reward(score: float, version: int, t: float, turns: int = 2, status: R.RewardStatus = R.RewardStatus.OK,
           tools: dict[str, int] | None = None) -> R.Reward:
    env = replace(R.Envelope.new("judge", group_id="g", rollout_id=f"r{score}{t}"),
                  event_time=datetime.fromtimestamp(t, timezone.utc))
    return R.Reward(env, score, status, R.JudgeInfo("math", "h"), 4, "planner", version, turns,
                    R.RolloutStatus.ANSWERED, tool_calls=tools or {})


def test_tumbling_windows_per_version() -> None:
    w = RewardWindows(window_s=60, success_threshold=0.5, grace_s=0)
    w.add(reward(1.0, 1, 1000.0, turns=1, tools={"calculator": 2}))
    w.add(reward(0.0, 1, 1010.0, turns=3, tools={"calculator": 1}))
    r = reward(0.6, 2, 1019.0)
    assert w.add(r) and not w.add(r)  # duplicate
    w.add(reward(1.0, 1, 1021.0))  # next window [1020, 1080)
    w2 = RewardWindows(window_s=60, success_threshold=0.5, grace_s=0)
    for x in (reward(1.0, 1, 1000.0, turns=1, tools={"calculator": 2}), reward(0.0, 1, 1010.0, turns=3,
              tools={"calculator": 1}), reward(0.6, 2, 1019.0), reward(1.0, 1, 1021.0)):
        w2.add(x)
    out = w2.flush(1020.0)
    by_v = {m.adapter_version: m for m in out}
    assert set(by_v) == {1, 2}
    assert by_v[1].count == 2 and by_v[1].mean_reward == 0.5 and by_v[1].success_rate == 0.5
    assert by_v[1].mean_turns == 2.0 and by_v[1].tool_calls == {"calculator": 3}
    assert by_v[1].window_start.timestamp() == 960.0 and by_v[1].window_end.timestamp() == 1020.0
    assert by_v[2].success_rate == 1.0
    assert [m.count for m in w2.flush(1080.0)] == [1]


def test_error_reward_is_a_failure() -> None:
    w = RewardWindows(window_s=10, success_threshold=0.5, grace_s=0)
    w.add(reward(1.0, 0, 5.0, status=R.RewardStatus.ERROR))
    assert w.flush(100.0)[0].success_rate == 0.0


def test_a_window_reads_the_one_definition_of_a_versions_figures() -> None:
    """Mean reward = mean of the OK judge scores, success rate per judge reward (an ERROR reward fails, its score
    is not a reward), as VersionStats folds the same rewards; a person's reward is not the judge's."""
    rewards = [reward(1.0, 3, 1.0), reward(0.25, 3, 2.0), reward(0.9, 3, 3.0, status=R.RewardStatus.ERROR),
               reward(0.0, 3, 4.0, status=R.RewardStatus.ERROR)]
    w = RewardWindows(window_s=10, success_threshold=0.5, grace_s=0)
    assert all(w.add(r) for r in rewards)
    assert not w.add(replace(reward(0.0, 3, 5.0), judge=R.JudgeInfo("human:ada", "human")))
    s = VersionStats()
    for r in rewards:
        s.add(r, success_threshold=0.5)
    [m] = w.flush(100.0)
    assert (m.count, m.mean_reward, m.success_rate) == (s.rewards, s.reward_mean, s.success_rate) == (4, 0.625, 0.25)
    only_errors = RewardWindows(window_s=10, success_threshold=0.5, grace_s=0)
    only_errors.add(reward(0.7, 3, 1.0, status=R.RewardStatus.ERROR))
    assert (only_errors.flush(100.0)[0].mean_reward, VersionStats().as_dict()["reward_mean"]) == (0.0, 0.0)


def test_human_rewards_are_told_apart_from_the_judge() -> None:
    from dataclasses import replace

    from streamgrpo.lifecycle.stats import is_human

    person = replace(reward(0.0, 1, 1002.0), judge=R.JudgeInfo("human:ada", "human"))
    assert is_human(person) and not is_human(reward(1.0, 1, 1000.0))  # the metrics agent skips what this says
