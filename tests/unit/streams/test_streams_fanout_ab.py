"""Fan-out, admission and A/B decisions (pure)."""

from __future__ import annotations

import pytest

from streamgrpo.avro import records as R
from streamgrpo.streams import ids
from streamgrpo.streams.ab_controller import (
    ABPolicy,
    AdapterState,
    ArmStats,
    Promote,
    Rollback,
    Wait,
    choose_version,
    decide,
)
from streamgrpo.streams.fanout import FanoutPolicy, admit, fan_out


def policy(max_in_flight: int = 4, staleness: int = 1, gpv: int = 0) -> FanoutPolicy:
    return FanoutPolicy("planner", 5, R.SamplingParams(0.8, 0.95, 64), max_in_flight, staleness, gpv)


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


def test_admission_bounds() -> None:
    assert admit(3, 10, 0, policy(4)) is None
    assert "in flight" in (admit(4, 10, 0, policy(4)) or "")
    # trainer at version 1, staleness 1, 10 groups/version -> budget 30 groups
    assert admit(0, 29, 1, policy(100, 1, 10)) is None
    assert "version 1" in (admit(0, 30, 1, policy(100, 1, 10)) or "")
    assert admit(0, 30, 2, policy(100, 1, 10)) is None


def _pub(v: int) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", v, f"file:///a/{v}", "0" * 64, "base", v, [])


def test_adapter_state_without_canary_follows_latest() -> None:
    s = AdapterState()
    assert s.primary == 0
    s.apply(_pub(1), 0.0)
    s.apply(_pub(2), 0.0)
    assert (s.primary, s.canary, s.latest) == (2, None, 2)


def test_adapter_state_with_canary_and_choice() -> None:
    s = AdapterState()
    s.apply(_pub(1), 0.25)
    assert (s.primary, s.canary) == (0, 1)
    groups = [ids.group_id(f"t{i}") for i in range(2000)]
    share = sum(choose_version(s, g, 0.25) == 1 for g in groups) / len(groups)
    assert 0.2 < share < 0.3
    assert choose_version(s, groups[0], 0.25) == choose_version(s, groups[0], 0.25)
    s.apply(R.AdapterRolledBack(R.Envelope.new("ab"), "planner", 1, 0, "worse"), 0.25)
    assert s.canary is None and choose_version(s, groups[0], 0.25) == 0
    s.apply(_pub(1), 0.25)  # a rolled-back version never comes back as canary
    assert s.canary is None
    s.apply(_pub(2), 0.25)
    s.apply(R.AdapterPromoted(R.Envelope.new("ab"), "planner", 2, 0, "better"), 0.25)
    assert (s.primary, s.canary) == (2, None)


def _arm(n: int, mean: float) -> ArmStats:
    return ArmStats(n, n * mean)


def test_decide() -> None:
    p = ABPolicy(min_groups=5, min_gain=0.02, max_loss=0.05)
    assert isinstance(decide(_arm(4, 0.5), _arm(10, 0.9), p), Wait)
    assert isinstance(decide(_arm(5, 0.5), _arm(5, 0.53), p), Promote)
    assert isinstance(decide(_arm(5, 0.5), _arm(5, 0.44), p), Rollback)
    assert isinstance(decide(_arm(5, 0.5), _arm(5, 0.48), p), Wait)
