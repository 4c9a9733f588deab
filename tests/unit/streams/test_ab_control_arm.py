"""The A/B control arm is judged for the comparison only once its samples would be stale (pure parts).

The rule (``pacing.control_arm_trains``), which groups it applies to (``ab_controller.comparison_only``), how the
window closes such a group (reason ``control_arm``, no samples, its reward statistics kept) and how the readers of
GroupClosed tell it from a flat group (``stats.carries_signal``: per-version flat counts, the curriculum).
The real broker and trainer: tests/integration/test_ab_control_arm.py.
"""

from __future__ import annotations

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle import pacing
from streamgrpo.lifecycle.registry import AdapterRegistry, Line
from streamgrpo.lifecycle.stats import VersionStats, carries_signal
from streamgrpo.streams.ab_controller import comparison_only
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.streams.curriculum import Curriculum, CurriculumPolicy
from streamgrpo.streams.samples import ready_rollouts
from streamgrpo.streams.window_core import GroupState, WindowPolicy, add_reward, maybe_close, new_state

G = ids.group_id("task-1")


def line(canary_share: float, *published: tuple[int, int | None]) -> Line:
    reg = AdapterRegistry(canary_share)
    for v, parent in published:
        reg.apply(R.AdapterPublished(R.Envelope.new("trainer", event_id=ids.adapter_published_id("planner", v)),
                                     "planner", v, f"file:///a/{v}", "0" * 64, "base", v, [], parent_version=parent,
                                     auto_promote=canary_share == 0))
    return reg.line("planner")


def test_the_rule_keeps_one_publication_of_headroom() -> None:
    assert pacing.control_arm_trains(0, 0) is False  # on-policy: any sample of a moving trainer may go stale
    assert pacing.control_arm_trains(0, 1) is True
    assert pacing.control_arm_trains(1, 1) is False  # default staleness: never while a line is ahead
    assert pacing.control_arm_trains(2, 4) is True and pacing.control_arm_trains(4, 4) is False
    with pytest.raises(ValueError, match="behind >= 0"):
        pacing.control_arm_trains(-1, 1)


def test_only_the_primary_below_a_line_under_test_is_the_control_arm() -> None:
    testing = line(0.5, (1, None), (2, 1), (3, 2))
    assert testing.primary == 0 and testing.candidates == [1, 2, 3]
    assert comparison_only(testing, 0, max_staleness=1)  # 3 behind
    assert not comparison_only(testing, 3, max_staleness=1)  # the canary is the training line
    assert not comparison_only(testing, 2, max_staleness=1)  # an older candidate: the trainer's rule decides
    assert comparison_only(testing, 0, max_staleness=3) and not comparison_only(testing, 0, max_staleness=4)
    assert not comparison_only(line(0.5, (1, None)), 0, max_staleness=2)  # 1 behind, within the bound + headroom
    no_test = line(0.0, (1, None), (2, 1))  # canary_share 0: every version is primary at once
    assert no_test.primary == 2 and not comparison_only(no_test, 2, max_staleness=0)


def window_policy() -> WindowPolicy:
    return WindowPolicy("grpo", build_estimator("grpo"), timeout_s=10.0, partial_policy="score", min_group_size=2)


def group(scores: list[float], version: int) -> GroupState:
    s = new_state(G, "task-1", len(scores), now=100.0, partition=0)
    for i, score in enumerate(scores):
        rid = ids.rollout_id(G, i)
        s, ok = add_reward(s, R.Reward(
            envelope=R.Envelope.new("judge", event_id=ids.derived_id("reward", rid), task_id="task-1", group_id=G,
                                    rollout_id=rid),
            score=score, status=R.RewardStatus.OK, judge=R.JudgeInfo("math", "h"), group_size=len(scores),
            adapter_name="planner", adapter_version=version, turns=1, rollout_status=R.RolloutStatus.ANSWERED))
        assert ok
    return s


def test_a_control_arm_group_closes_without_samples_but_with_its_rewards() -> None:
    asked: list[int] = []

    def control(v: int) -> bool:
        asked.append(v)
        return v == 0

    state, closed = maybe_close(group([1.0, 0.0, 1.0, 0.0], version=0), window_policy(), 101.0, control)
    assert closed is not None and asked == [0]
    assert (closed.trains, closed.reason, closed.samples) == (False, pacing.CONTROL_ARM, 0)
    assert closed.reward_mean == pytest.approx(0.5) and closed.reward_std == pytest.approx(0.5)
    assert closed.received == 4 and state.advantages == {} and ready_rollouts(state, lambda r, t: True) == []
    # the line's group trains as before; a flat control group stays flat (it had nothing to train)
    line_state, line_closed = maybe_close(group([1.0, 0.0, 1.0, 0.0], version=3), window_policy(), 101.0, control)
    assert line_closed is not None and line_closed.trains and line_closed.samples == 4
    _, flat = maybe_close(group([1.0, 1.0, 1.0, 1.0], version=0), window_policy(), 101.0, control)
    assert flat is not None and flat.reason == "zero_variance"


def closed_event(trains: bool, reason: str, task_id: str = "t", attempt: int = 0) -> R.GroupClosed:
    return R.GroupClosed(envelope=R.Envelope.new("test", task_id=task_id, group_id=ids.group_id(task_id, attempt)),
                         status=R.GroupStatus.COMPLETE, expected=4, received=4, reward_mean=0.5,
                         reward_std=0.5 if reason != "zero_variance" else 0.0, estimator="grpo", trains=trains,
                         reason=reason, adapter_version=0, samples=4 if trains else 0)


def test_readers_tell_a_control_arm_group_from_a_flat_one() -> None:
    control, flat, trained = (closed_event(False, pacing.CONTROL_ARM), closed_event(False, "zero_variance"),
                              closed_event(True, "complete"))
    assert [carries_signal(e) for e in (control, flat, trained)] == [True, False, True]
    stats = VersionStats()
    for e in (control, flat, trained):
        stats.add(e)
    assert stats.groups_closed == 3 and stats.flat_groups == 1


def test_the_curriculum_requeues_a_control_arm_task_as_one_with_signal() -> None:
    cur = Curriculum(CurriculumPolicy(requeue_max=3, park_after=100))
    t = R.Task(envelope=R.Envelope.new("test", task_id="a"), question="q", source="builtin", group_size=4)
    cur.remember(t, 0)
    decision = cur.closed(closed_event(False, pacing.CONTROL_ARM, task_id="a"))
    assert decision is not None and decision.action == "requeue"


def test_the_run_report_counts_the_control_arm_apart_from_trained_and_stale_samples() -> None:
    from streamgrpo.cli.progress import Progress
    from streamgrpo.cli.report import _loop_lines

    progress = Progress()
    progress.apply(closed_event(False, pacing.CONTROL_ARM, task_id="a"))
    progress.apply(closed_event(True, "complete", task_id="b"))
    loop = progress.loop_closure()
    assert (loop["control_arm_groups"], loop["control_arm_rollouts"]) == (1, 4)
    assert progress.versions[0].flat_groups == 0 and progress.groups_training == 1
    assert "(1 trained, 1 A/B control only)" in progress.line()
    assert any("comparison only" in line and "1 groups, 4 rollouts" in line for line in _loop_lines(loop))


def test_a_group_that_started_as_the_control_arm_closes_as_one_after_its_test_is_decided() -> None:
    """It was outside admission's budget while it ran: after the test rolled the line back (the primary's samples
    are fresh again) it must still not train, or its samples would go beyond the budget."""
    import asyncio
    import types

    from streamgrpo.streams.fanout import FanoutPolicy, fan_out
    from streamgrpo.streams.follower import LoopView
    from streamgrpo.streams.window import Window

    view = LoopView(0.5)
    view.apply(R.AdapterPublished(R.Envelope.new("trainer", event_id=ids.adapter_published_id("planner", 1)),
                                  "planner", 1, "file:///a/1", "0" * 64, "base", 1, [], auto_promote=False))
    policy = FanoutPolicy("planner", 4, R.SamplingParams(), 4, 1, 8)
    task = R.Task(R.Envelope.new("up", task_id="task-1"), "2+2?", "math", 4, ["4"], metadata={"ab_arm": "forged"})
    assert G == ids.group_id("task-1")
    assert "ab_arm" not in fan_out(task, 0, policy)[0].metadata  # a task's own value is dropped
    started = fan_out(task, 0, policy, control=comparison_only(view.adapters("planner"), 0, 1))
    assert {r.metadata["ab_arm"] for r in started} == {"control_arm"}
    for r in started:
        view.apply(r)
    caught_up = asyncio.Event()
    caught_up.set()
    window = Window.__new__(Window)  # the agent's state without a Faust app: only what _control reads
    window.ctx = types.SimpleNamespace(settings=types.SimpleNamespace(adapter_name="planner", max_staleness=1))
    window.follower = types.SimpleNamespace(view=view, caught_up=caught_up)
    other = ids.group_id("task-2")
    assert window._control(G, 0) and window._control(other, 0)  # v1 under test: v0's groups are the control arm
    view.apply(R.AdapterRolledBack(R.Envelope.new("ab-controller"), "planner", 1, 0, "worse", {}, "ab-controller"))
    assert view.adapters("planner").candidates == []
    assert window._control(G, 0)  # started as the control arm: still closes as one
    assert not window._control(other, 0)  # a group of v0 started now trains
