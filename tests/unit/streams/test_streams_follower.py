"""The streams follower's fold (pure): groups in flight, samples waiting for the trainer, adapters."""

from __future__ import annotations

import dataclasses

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.pacing import AB_ARM_KEY, CONTROL_ARM, Backlog
from streamgrpo.streams.follower import LoopView


def request(task: str, size: int = 4, version: int = 0) -> R.RolloutRequest:
    g = ids.group_id(task)
    return R.RolloutRequest(R.Envelope.new("streams", group_id=g, rollout_id=ids.rollout_id(g, 0)), "q", "s", 0,
                            size, "planner", version, 4, R.SamplingParams())


def closed(task: str, received: int, samples: int | None, trains: bool = True) -> R.GroupClosed:
    g = ids.group_id(task)
    return R.GroupClosed(R.Envelope.new("streams", event_id=ids.group_closed_id(g), group_id=g),
                         R.GroupStatus.COMPLETE, 4, received, 0.5, 0.5, "grpo", trains, "complete", 0, [], samples)


def published(version: int, start: int, end: int, **metrics: float) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", version, f"file:///a/{version}", "0" * 64,
                              "base", version, [R.OffsetRange("training-samples", 0, start, end)], metrics=metrics)


def test_an_error_reward_is_not_a_sample_waiting_forever() -> None:
    """Regression: GroupClosed.received counts ERROR rewards, which yield no sample; counting them as samples
    left phantom samples 'waiting for the trainer' forever and eventually blocked admission."""
    view = LoopView(canary_share=0.0)
    view.apply(request("t1"))
    assert view.backlog().groups_in_flight == 1 and view.backlog().rollouts_in_flight == 4
    view.apply(closed("t1", received=4, samples=3))  # one ERROR reward
    assert view.backlog().pending_samples == 3 and view.in_flight == 0
    view.apply(published(1, 0, 2))  # the trainer consumed the 3 samples
    assert view.backlog().pending_samples == 0
    view.apply(published(1, 0, 2))  # a redelivered announcement is counted once
    assert view.backlog().pending_samples == 0 and view.adapters("planner").primary == 1


def test_closed_groups_are_counted_once_and_old_events_fall_back_to_received() -> None:
    view = LoopView(canary_share=0.0)
    view.apply(closed("t1", received=2, samples=None))  # written before `samples` existed
    view.apply(closed("t1", received=2, samples=None))
    view.apply(closed("t2", received=4, samples=0, trains=False))
    assert view.backlog().pending_samples == 2


def test_redelivered_duplicates_the_trainer_read_do_not_make_the_queue_look_shorter() -> None:
    """Regression: a streams worker that re-processes a window after a rebalance re-sends its samples; the trainer
    reads and drops the duplicates, and they are in its lineage. Counting them as consumed made the view believe
    fewer samples were waiting than were, so the fan-out over-admitted and whole groups went stale."""
    view = LoopView(canary_share=0.0)
    for task in ("t1", "t2"):
        view.apply(request(task))
        view.apply(closed(task, received=4, samples=4))
    assert view.backlog().pending_samples == 8
    # v1 read 8 records: t1's 4 samples and their 4 redelivered copies; t2's 4 samples still wait
    view.apply(published(1, 0, 7, dropped_duplicate=4.0))
    assert view.backlog().pending_samples == 4
    view.apply(published(2, 8, 12, dropped_not_a_sample=1.0))
    assert view.backlog().pending_samples == 0


def test_the_ab_control_arms_groups_are_in_flight_but_outside_the_budget() -> None:
    """issue 21: a group the fan-out started as the A/B control arm (its requests say so: metadata ab_arm) is in
    flight but outside admission's training budget until it closes; every reader folds the same fact."""
    view = LoopView(canary_share=0.5)
    control = request("control", 8)
    view.apply(dataclasses.replace(control, metadata={AB_ARM_KEY: CONTROL_ARM}))
    view.apply(request("canary", 8, version=1))
    view.note_requested(ids.group_id("control-2"), 8, control=True)  # the fan-out's own note, the same fact
    view.apply(dataclasses.replace(request("other", 8), metadata={AB_ARM_KEY: "something else"}))
    assert view.backlog() == Backlog(4, 16, 0, 16)
    view.apply(closed("control", received=8, samples=0, trains=False))
    assert view.backlog() == Backlog(3, 16, 0, 8)
