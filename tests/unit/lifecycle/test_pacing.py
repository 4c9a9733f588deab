"""The pacing rule alone: budget, capacity, versions behind, the drop rule, the queue -- and that admission
within the budget really bounds staleness when driven against a trainer model."""

from __future__ import annotations

import pytest

from streamgrpo.lifecycle import pacing
from streamgrpo.lifecycle.pacing import Backlog, Pacing


def test_budget_and_capacity_follow_both_settings() -> None:
    assert Pacing(1, 8).admission_budget == 16 and Pacing(1, 8).intake_capacity == 24
    assert Pacing(0, 4).admission_budget == 4 and Pacing(0, 4).intake_capacity == 8
    assert Pacing(3, 5).admission_budget == 20 and Pacing(3, 5).intake_capacity == 25


@pytest.mark.parametrize("staleness, per_step", [(-1, 8), (0, 0), (2, -3)])
def test_settings_out_of_range_are_a_clear_error(staleness: int, per_step: int) -> None:
    with pytest.raises(ValueError, match="max_staleness >= 0 and samples_per_step >= 1"):
        Pacing(staleness, per_step)


def test_versions_behind_counts_along_the_chain_and_falls_back_to_the_numbers() -> None:
    chain = [2, 1, 0]  # weights v5 descend from v2 (v3, v4 were left on a rollback)
    assert pacing.versions_behind(5, 5, chain) == 0
    assert pacing.versions_behind(5, 2, chain) == 1  # not 5 - 2
    assert pacing.versions_behind(5, 0, chain) == 3
    assert pacing.versions_behind(5, 4, chain) == 1  # not on the chain: the numbers' difference
    assert pacing.versions_behind(5, 2) == 3 and pacing.versions_behind(5, 2, None) == 3  # no chain known
    assert pacing.versions_behind(2, 4) == -2  # a newer sample than the weights is not behind


def test_drop_rule_rolled_back_before_stale_and_the_bound_is_inclusive() -> None:
    chain = [2, 1, 0]
    assert pacing.drop_reason(3, 5, 0, discarded={3, 4}, chain=chain) == "rolled_back"
    assert pacing.drop_reason(3, 5, 100, discarded={3, 4}, chain=chain) == "rolled_back"  # however fresh
    assert pacing.drop_reason(2, 5, 1, discarded={3, 4}, chain=chain) is None  # exactly max_staleness behind
    assert pacing.drop_reason(1, 5, 1, discarded={3, 4}, chain=chain) == "stale"  # two behind
    assert pacing.drop_reason(1, 5, 1) == "stale" and pacing.drop_reason(4, 5, 1) is None  # by numbers
    assert pacing.drop_reason(3, 5, 1) == "stale"
    assert pacing.drop_reason(5, 5, 0) is None


def test_first_fresh_version_agrees_with_the_drop_rule() -> None:
    for staleness in range(4):
        for version in range(8):
            fresh = pacing.first_fresh_version(version, staleness)
            for behaviour in range(version + 1):
                assert (pacing.drop_reason(behaviour, version, staleness) is None) == (behaviour >= fresh)


def test_admission_caps_groups_then_never_starves_then_keeps_the_budget() -> None:
    p = Pacing(1, 8)
    assert pacing.admit(Backlog(4, 16, 0), 4, p, 4) == "4 groups in flight (max 4)"
    assert pacing.admit(Backlog(3, 12, 0), 4, p, 4) is None
    assert pacing.admit(Backlog(0, 0, 7), 64, p, 100) is None  # 7 queued < one step: never starve the trainer
    assert pacing.admit(Backlog(1, 4, 8), 4, p, 100) is None  # 12 + 4 == 16: inside the budget
    reason = pacing.admit(Backlog(1, 4, 9), 4, p, 100)
    assert reason is not None and "would exceed 16 = (1 + max_staleness 1) x samples_per_step 8" in reason
    assert "9 samples waiting" in reason and "4 rollouts in flight" in reason
    assert pacing.admit(Backlog(1, 4, 4), 4, Pacing(0, 8), 100) is not None  # on-policy: one step only


def simulate(p: Pacing, group_size: int, groups: int, drain_every: int) -> list[int]:
    """Admission against a trainer that takes ``samples_per_step`` samples per version, oldest first, and a
    group that closes ``drain_every`` admission rounds after it starts; returns each trained sample's staleness
    (trainer version - sampled version) by :func:`pacing.versions_behind`."""
    version, issued, tick, out = 0, 0, 0, []
    in_flight: list[tuple[int, int]] = []  # (close tick, sampled version)
    pending: list[int] = []
    while issued < groups or in_flight or len(pending) >= p.samples_per_step:
        tick += 1
        backlog = Backlog(len(in_flight), group_size * len(in_flight), len(pending))
        if issued < groups and pacing.admit(backlog, group_size, p, 1 << 30) is None:
            in_flight.append((tick + drain_every, version))
            issued += 1
        for closed in [g for g in in_flight if g[0] <= tick]:
            in_flight.remove(closed)
            pending += [closed[1]] * group_size
        while len(pending) >= p.samples_per_step:
            out += [pacing.versions_behind(version, v) for v in pending[:p.samples_per_step]]
            pending, version = pending[p.samples_per_step:], version + 1
    return out


@pytest.mark.parametrize("staleness, per_step, group_size, drain", [(1, 8, 4, 3), (0, 8, 4, 2), (2, 6, 3, 5),
                                                                    (1, 4, 4, 4)])
def test_admission_within_the_budget_trains_nothing_staler_than_max_staleness(
        staleness: int, per_step: int, group_size: int, drain: int) -> None:
    p = Pacing(staleness, per_step)
    behind = simulate(p, group_size, groups=40, drain_every=drain)
    assert len(behind) == 40 * group_size // per_step * per_step  # every full step was trained
    assert max(behind) <= staleness
    assert max(simulate(Pacing(staleness + 3, per_step), group_size, 40, drain)) > staleness  # the bound binds


def test_pending_and_dequeued_are_the_queue() -> None:
    assert pacing.pending_samples(10, 4) == 6 and pacing.pending_samples(3, 9) == 0
    assert pacing.samples_dequeued(12, {"duplicate": 2.0, "not_a_sample": 1.0, "stale": 5.0}) == 9  # stale left
    assert pacing.samples_dequeued(2, {"duplicate": 5.0}) == 0
    assert pacing.samples_dequeued(7, {}) == 7


def test_drop_counts_round_trip_through_the_metrics_map() -> None:
    metrics = {"loss": 0.5, **pacing.drop_metrics({"stale": 3, "duplicate": 1}, 2)}
    assert metrics == {"loss": 0.5, "dropped_stale": 3.0, "dropped_duplicate": 1.0, "max_staleness": 2.0}
    assert pacing.drops_in(metrics) == {"stale": 3.0, "duplicate": 1.0}
    assert pacing.samples_dequeued(10, pacing.drops_in(metrics)) == 9
