"""Collapse alarms on per-version health (lifecycle/health.py)."""

from __future__ import annotations

from streamgrpo.lifecycle.health import AlarmRule, VersionHealth, alarms

RULE = AlarmRule(min_rollouts=8)


def version(n: int, answered: float, tools: float, correct: float, flat: float, groups: int = 4) -> VersionHealth:
    h = VersionHealth()
    for i in range(n):
        h.add_rollout(i < answered * n, round(tools))
        h.add_reward(1.0 if i < correct * n else 0.0)
    for i in range(groups):
        h.add_group(trains=i >= flat * groups)
    return h


def test_the_measured_collapse_answering_at_once_while_reward_falls_raises_alarms() -> None:
    """The shape docs/learning.md measured with a format credit: answered 0.20 -> 1.00, success down, no tools."""
    per = {0: version(16, 0.2, 3, 0.25, 0.25), 1: version(16, 0.3, 3, 0.25, 0.25),
           5: version(16, 1.0, 0, 0.0, 1.0), 6: version(16, 1.0, 0, 0.0, 1.0)}
    out = alarms(per, RULE)
    assert len(out) == 3, out
    assert "answered rate up 0.25 -> 1.00" in out[0] and "dropping its tools" in out[1] and "100%" in out[2]


def test_healthy_learning_raises_none_and_too_little_data_raises_none() -> None:
    per = {0: version(16, 1.0, 3, 0.25, 0.25), 5: version(16, 1.0, 3, 0.5, 0.0)}
    assert alarms(per, RULE) == []
    assert alarms({0: version(8, 0.2, 3, 0.3, 0.0), 1: version(4, 1.0, 0, 0.0, 1.0)}, RULE) == []  # pools overlap


def test_reward_std_and_rates_by_hand() -> None:
    h = version(4, 0.5, 2, 0.5, 0.5, groups=2)
    assert (h.answered_rate, h.tools_per_rollout, h.reward_mean, h.reward_std, h.flat_share) == (0.5, 2, 0.5, 0.5, 0.5)
    assert h.as_dict()["zero_variance_share"] == 0.5


def test_probe_groups_of_cold_kinds_do_not_raise_the_no_variance_alarm() -> None:
    """A default run's end: the full groups still train, but most closed groups are a cold kind's probes of 2,
    flat by design. Counted together they made 88-100 % flat and raised the alarm at the end of every run."""
    def with_probes(full_flat: float, probes: int) -> VersionHealth:
        h = version(16, 1.0, 2, 0.5, full_flat, groups=4)
        for _ in range(probes):
            h.add_group(trains=False, probe=True)
        return h

    early = {0: version(16, 1.0, 2, 0.25, 0.5), 1: version(16, 1.0, 2, 0.25, 0.5)}
    late = {5: with_probes(0.25, 20), 6: with_probes(0.25, 20)}
    assert late[5].flat_share >= RULE.flat_share  # all groups together: the old alarm's reading
    assert alarms({**early, **late}, RULE) == []
    flat_late = {5: with_probes(1.0, 20), 6: with_probes(1.0, 20)}
    [warning] = alarms({**early, **flat_late}, RULE)
    assert "100% of recent groups had no reward variance" in warning and "20 probe groups not counted" in warning  # the recent pool: v6
