"""Fan-out, admission and the version choice of a group (pure); the A/B decision core: unit/lifecycle/test_ab.py."""

from __future__ import annotations

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.registry import AdapterRegistry
from streamgrpo.streams.ab_controller import choose_version
from streamgrpo.streams.fanout import Backlog, FanoutPolicy, admit, check_task, fan_out


def policy(max_in_flight: int = 4, staleness: int = 1, per_step: int = 8) -> FanoutPolicy:
    return FanoutPolicy("planner", 5, R.SamplingParams(0.8, 0.95, 64), max_in_flight, staleness, per_step)


def task(n: int = 4, **meta: str) -> R.Task:
    return R.Task(envelope=R.Envelope.new("up", task_id="T1"), question="2+2?", source="math", group_size=n,
                  ground_truths=["4"], metadata=dict(meta))


def test_fan_out_builds_group_with_deterministic_ids() -> None:
    reqs = fan_out(task(3), version=7, policy=policy())
    g = ids.group_id("T1", 0)
    assert [r.envelope.rollout_id for r in reqs] == [ids.rollout_id(g, i) for i in range(3)]
    assert {r.envelope.group_id for r in reqs} == {g} and {r.adapter_version for r in reqs} == {7}
    assert [r.rollout_index for r in reqs] == [0, 1, 2] and reqs[0].max_turns == 5
    assert reqs[0].sampling.temperature == 0.8
    again = fan_out(task(3), version=7, policy=policy())
    assert [r.event_id for r in again] == [r.event_id for r in reqs]
    retry = fan_out(task(3, attempt="1"), version=7, policy=policy())
    assert retry[0].envelope.group_id == ids.group_id("T1", 1) != g


def test_fan_out_rejects_bad_task() -> None:
    with pytest.raises(ValueError):
        fan_out(task(0), 0, policy())
    with pytest.raises(ValueError, match="group_size <= 1024"):
        fan_out(task(10**9), 0, policy())  # bounded before a single request is built


def test_intake_bounds_group_size_and_encoded_size() -> None:
    assert check_task(task(4), 1000) is None
    assert check_task(task(0), 1000)[0] == check_task(task(1025), 1000)[0] == "invalid_task"
    code, reason = check_task(task(4), 300_000)
    assert code == "task_too_large" and "300000 bytes" in reason


def test_admission_bounds_groups_in_flight() -> None:
    assert admit(Backlog(3, 12, 0), 4, policy(4)) is None
    assert "in flight" in (admit(Backlog(4, 16, 0), 4, policy(4)) or "")


def test_admission_budget_is_one_step_per_version_of_staleness() -> None:
    # samples_per_step 8, max_staleness 1 -> at most 16 samples waiting or in flight
    assert admit(Backlog(1, 4, 8), 4, policy(100, 1, 8)) is None  # 12 + 4 = 16
    assert "exceed 16" in (admit(Backlog(1, 4, 9), 4, policy(100, 1, 8)) or "")
    assert "exceed 8" in (admit(Backlog(1, 4, 4), 4, policy(100, 0, 8)) or "")  # on-policy: one step only


def test_admission_never_starves_the_trainer() -> None:
    # fewer samples coming than one step needs: admit even a group larger than the budget
    assert admit(Backlog(0, 0, 7), 16, policy(100, 0, 8)) is None
    assert admit(Backlog(1, 3, 4), 8, policy(100, 0, 8)) is None


def test_the_ab_control_arm_takes_no_share_of_the_budget() -> None:
    # issue 21: a test's control groups give the trainer no samples; counted, they held the training line's budget
    full_of_control = Backlog(groups_in_flight=4, rollouts_in_flight=8, pending_samples=0, control_rollouts_in_flight=16)
    assert admit(full_of_control, 8, policy(100, 1, 8)) is None  # 8 + 8 <= 16: the control arm's 16 are not queued
    assert "exceed 16" in (admit(Backlog(5, 16, 0, 16), 8, policy(100, 1, 8)) or "")
    assert admit(Backlog(4, 0, 0, 32), 8, policy(100, 1, 8)) is None  # no sample coming: never starve
    assert "in flight" in (admit(Backlog(4, 0, 0, 32), 8, policy(4, 1, 8)) or "")  # the arm's only bound


def simulate(staleness: int, per_step: int, group_size: int, zero_variance_every: int, groups: int) -> list[int]:
    """Drive admit() against a trainer model; returns the staleness (trainer version - sampled version) of
    every trained sample. Groups complete in order; every `zero_variance_every`-th group trains nothing."""
    pol = policy(100, staleness, per_step)
    version, pending, in_flight = 0, [], []  # pending: sampled versions of samples waiting for the trainer
    lags: list[int] = []
    issued = 0
    while issued < groups or in_flight or len(pending) >= per_step:
        backlog = Backlog(len(in_flight), group_size * len(in_flight), len(pending))
        if issued < groups and admit(backlog, group_size, pol) is None:
            in_flight.append((issued, version))
            issued += 1
            continue
        if len(pending) >= per_step:  # the trainer steps and publishes the next version
            step, pending = pending[:per_step], pending[per_step:]
            lags += [version - v for v in step]
            version += 1
        elif in_flight:  # the oldest group closes
            index, sampled = in_flight.pop(0)
            if (index + 1) % zero_variance_every:
                pending += [sampled] * group_size
        else:
            break
    return lags


@pytest.mark.parametrize("staleness,per_step,group_size,zv", [(0, 8, 4, 3), (1, 8, 4, 3), (1, 8, 8, 2),
                                                              (2, 16, 4, 5), (1, 4, 8, 1000)])
def test_admission_keeps_every_trained_sample_within_max_staleness(staleness, per_step, group_size, zv) -> None:
    lags = simulate(staleness, per_step, group_size, zv, groups=60)
    assert lags and max(lags) <= staleness


def _pub(v: int) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", v, f"file:///a/{v}", "0" * 64, "base", v, [])


def test_choice_without_canary_is_the_latest_published() -> None:
    reg = AdapterRegistry(0.0)
    reg.apply(_pub(1))
    reg.apply(_pub(2))
    assert choose_version(reg.line("planner"), ids.group_id("t"), 0.0) == 2


def test_choice_with_a_canary_is_a_stable_share_of_groups() -> None:
    reg = AdapterRegistry(0.25)
    reg.apply(_pub(1))
    groups = [ids.group_id(f"t{i}") for i in range(2000)]
    share = sum(choose_version(reg.line("planner"), g, 0.25) == 1 for g in groups) / len(groups)
    assert 0.2 < share < 0.3
    assert choose_version(reg.line("planner"), groups[0], 0.25) == choose_version(reg.line("planner"), groups[0], 0.25)
    reg.apply(R.AdapterRolledBack(R.Envelope.new("ab-controller"), "planner", 1, 0, "worse"))
    assert all(choose_version(reg.line("planner"), g, 0.25) == 0 for g in groups[:50])
