"""The one per-version statistics type (lifecycle/stats.py): its fold by hand, and the progress view, the
report and the collapse alarms reading the same fold."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import tomllib

from streamgrpo.avro import records as R
from streamgrpo.cli.progress import Progress
from streamgrpo.lifecycle import health
from streamgrpo.lifecycle.stats import Stats, VersionStats

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def env(n: int, **ids: str) -> R.Envelope:
    e = R.Envelope.new("test", **ids)
    return R.Envelope(e.event_id, T0 + timedelta(seconds=n), e.producer, e.task_id, e.group_id, e.rollout_id)


def rollout(n: int, v: int, answered: bool, calls: int) -> R.RolloutCompleted:
    status = R.RolloutStatus.ANSWERED if answered else R.RolloutStatus.MAX_TURNS
    return R.RolloutCompleted(env(n, group_id=f"g{v}-{n // 4}", rollout_id=f"r{n}"), "q", "builtin", "a", calls + 1,
                              status, 4, "planner", v, 10, tool_calls={"calculator": calls} if calls else {})


def reward(n: int, v: int, score: float, ok: bool = True, judge: str = "correct",
           rollout_status: R.RolloutStatus = R.RolloutStatus.ANSWERED) -> R.Reward:
    return R.Reward(env(n, group_id=f"g{v}-{n // 4}", rollout_id=f"r{n}"), score,
                    R.RewardStatus.OK if ok else R.RewardStatus.ERROR, R.JudgeInfo(judge, "h"), 4, "planner", v, 1,
                    rollout_status)


def closed(n: int, v: int, trains: bool) -> R.GroupClosed:
    return R.GroupClosed(env(n, group_id=f"c{v}-{n}"), R.GroupStatus.COMPLETE, 4, 4, 0.5, 0.0, "grpo", trains,
                         "complete", v)


def test_the_fold_by_hand() -> None:
    s = VersionStats()
    for event in [rollout(1, 2, True, 3), rollout(2, 2, False, 0), reward(1, 2, 1.0), reward(2, 2, 0.25),
                  reward(3, 2, 0.0, ok=False, rollout_status=R.RolloutStatus.ERROR),  # the rollout failed
                  reward(4, 2, 0.9, ok=False),  # the judge failed: an ERROR reward is never a success
                  reward(5, 2, 0.0, judge="human:ada"), closed(6, 2, trains=False), closed(7, 2, trains=True)]:
        s.add(event, success_threshold=0.5)
    assert (s.rollouts, s.answered, s.tool_calls, s.answered_rate, s.tools_per_rollout) == (2, 1, 3, 0.5, 1.5)
    assert (s.rewards, s.ok, s.reward_sum, s.reward_sq, s.successes) == (4, 2, 1.25, 1.0625, 1)
    assert (s.rollout_errors, s.judge_failures, s.human, s.human_mean) == (1, 1, 1, 0.0)
    assert (s.reward_mean, s.reward_std, s.success_rate) == (0.625, 0.375, 0.25)
    assert (s.groups_closed, s.flat_share, s.groups) == (2, 0.5, 0)  # groups: A/B outcomes, appended by Stats
    both = s.merged(s)
    assert (both.rewards, both.reward_sq, both.human, both.flat_groups, both.reward_mean) == (8, 2.125, 2, 2, 0.625)
    assert VersionStats().reward_mean is None and VersionStats().as_dict()["reward_mean"] == 0.0


def stream() -> list[R.Event]:
    """v0 uses its tools and is right half the time; v6 answers at once, without tools, and is mostly wrong.
    Each version also gets a person's label and an ERROR reward, which no view may count as a judge score."""
    out: list[R.Event] = []
    for v, answered, calls, right in [(0, 0.5, 2, 0.5), (6, 1.0, 0, 0.125)]:
        for i in range(32):
            n = v * 100 + i
            out += [rollout(n, v, i < answered * 32, calls), reward(n, v, 1.0 if i < right * 32 else 0.25)]
        out += [reward(v * 100 + 50, v, 0.0, ok=False), reward(v * 100 + 51, v, 0.0, judge="human:ada")]
        out += [closed(v * 100 + g, v, trains=v == 0) for g in range(8)]
    return out


def test_the_progress_view_the_report_and_the_alarms_read_the_same_fold() -> None:
    p = Progress(success_threshold=0.5)
    for event in stream():
        p.apply(event)
    summary = p.summary()
    for v, (mean, rate) in {0: (0.625, 16 / 33), 6: (0.34375, 4 / 33)}.items():
        s = p.versions[v]
        # the progress line and the report's per_version entry: the mean of the OK judge rewards, the success rate
        # per judge reward (the ERROR reward fails), as the A/B test and the registry count it; the human left out
        assert summary["per_version"][str(v)] == {"count": 32, "mean_reward": mean, "success_rate": rate}
        assert (s.ok, s.rewards, s.reward_mean, s.success_rate) == (32, 33, mean, rate)
        assert f"v{v}={mean:.2f}(n=32)" in p.line()
        # the report's health entry: the same rollouts and the same mean reward
        assert summary["health"]["per_version"][str(v)]["reward_mean"] == round(mean, 4)
        assert summary["health"]["per_version"][str(v)]["rollouts"] == s.rollouts == 32
    assert p.human_rewards == 2
    # the alarms read the very objects the progress view reads, and quote the same means
    warnings = health.alarms({0: p.versions[0], 6: p.versions[6]})
    assert warnings == p.alarms() == summary["health"]["alarms"] and len(warnings) == 3, warnings
    assert "answered rate up 0.50 -> 1.00 while reward fell 0.62 -> 0.34" in warnings[0]
    assert f"ALARM: {warnings[0]}" in p.line()
    # the A/B view folds the same rule: same OK scores, the same success rate (the ERROR reward fails in both)
    ab = Stats(success_threshold=0.5)
    for event in stream():
        ab.apply(event)
    a = ab.of("planner", 0)
    assert (a.ok, a.reward_mean, a.rewards, a.successes, a.human) == (32, 0.625, 33, 16, 1)
    assert a.success_rate == 16 / 33 == p.per_version[0].success_rate


def request(n: int, group: str, probe: bool) -> R.RolloutRequest:
    return R.RolloutRequest(env(n, group_id=group, rollout_id=f"q{n}"), "q", "builtin", 0, 2, "planner", 3, 3,
                            R.SamplingParams(0.7, 1.0, 64), metadata={"probe": "lookup"} if probe else {})


def test_progress_counts_a_groups_probe_from_its_requests() -> None:
    """GroupClosed does not say the group was a probe; its requests' metadata does, and the progress view (which
    follows rollout-requests) folds the group as a probe: counted in the groups and apart in the probe figures."""
    p = Progress()
    for event in [request(1, "g-probe", True), request(2, "g-full", False),
                  R.GroupClosed(env(3, group_id="g-probe"), R.GroupStatus.COMPLETE, 2, 2, 0.0, 0.0, "grpo", False,
                                "complete", 3),
                  R.GroupClosed(env(4, group_id="g-full"), R.GroupStatus.COMPLETE, 8, 8, 0.5, 0.5, "grpo", True,
                                "complete", 3)]:
        p.apply(event)
    s = p.versions[3]
    assert (s.groups_closed, s.flat_groups, s.probe_groups, s.probe_flat) == (2, 1, 1, 1)
    assert (s.flat_share, s.full_flat_share) == (0.5, 0.0)
    assert p.summary()["health"]["per_version"]["3"]["probe_groups"] == 1


def product_files() -> list[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = sorted({d.split("/")[0] for d in config["tool"]["setuptools"]["package-dir"].values()})
    return [p for f in folders for p in sorted((ROOT / f).rglob("*.py"))]


def test_one_per_version_statistics_class_in_the_product() -> None:
    """VersionStats, its fold over the log (Stats) and the A/B arm live in lifecycle/stats.py alone; nothing in the
    product or bench/ imports the former home ``streamgrpo.models.stats``."""
    pattern = re.compile(r"^class (VersionStats|VersionHealth|Stats|Arm)\b", re.M)
    homes = [p.relative_to(ROOT).as_posix() for p in product_files() if pattern.search(p.read_text())]
    assert homes == ["lifecycle/stats.py"], homes
    assert health.VersionHealth is VersionStats
    old_home = re.compile(r"^\s*(from streamgrpo\.models\.stats\b|import streamgrpo\.models\.stats\b|"
                          r"from streamgrpo\.models import .*\bstats\b)", re.M)
    files = [*product_files(), *sorted((ROOT / "bench").glob("*.py")), *sorted((ROOT / "tests").rglob("*.py"))]
    importers = [p.relative_to(ROOT).as_posix() for p in files if old_home.search(p.read_text())]
    assert importers == [], importers
