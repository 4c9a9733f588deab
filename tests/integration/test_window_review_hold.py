"""Issue 38, "the review hold applies to groups opened for review", on the real broker through a real `streamgrpo
streams` window worker ([streams] served_review_hold_s = 6, review_hold_s at its default 0): a training group closes
and trains as soon as it is complete; a group `serve` answered to a client (its RolloutCompleted's source
`mcp:alice`) stays open for the client's feedback, which then replaces the judge's reward; a served group nobody
gives feedback on closes on the judge's reward once the hold is over."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from support.streams import SyntheticGroup, WorkerProcess, synthetic_group, wait_for_records

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.producer import EventProducer
from streamgrpo.topics.sdk import human_reward

pytestmark = pytest.mark.broker
HOLD_S = 6.0



def _served(task: str, client: str) -> SyntheticGroup:
    """A call `serve` answered: a group of one whose RolloutCompleted carries the source serve writes, judged 0."""
    group = synthetic_group(task, [0.0], turns=[1])
    group.completions = [dataclasses.replace(c, source=f"mcp:{client}") for c in group.completions]
    return group


def test_only_served_groups_are_held_for_review_and_feedback_replaces_the_judges_reward(
        kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    training = synthetic_group("training", [1.0, 0.0, 0.0, 0.0], turns=[1, 1, 1, 1])
    reviewed, quiet = _served("served-reviewed", "alice"), _served("served-quiet", "bob")
    worker = WorkerProcess(kafka_ns, "window", tmp_path / "data",
                           {"served_review_hold_s": HOLD_S, "tick_interval_s": 0.5})
    try:
        with EventProducer(kafka_ns, "test") as prod:
            for group in (training, reviewed, quiet):
                for event in group.events():
                    prod.send(event)
            # the client's feedback comes after the judge's reward (the same partition: the window reads it after)
            prod.send(human_reward(reviewed.completions[0], 1.0, "mcp:alice"))
        closed = {r.event.envelope.group_id: r.event for r in wait_for_records(kafka_ns, "groups", 3, 120.0)}
        samples = wait_for_records(kafka_ns, "training-samples", 4, 120.0)
        alive = worker.alive()
    finally:
        worker.stop()
    assert alive and len(closed) == 3, worker.log_text()[-3000:]
    trained, held, unlabelled = closed[training.group_id], closed[reviewed.group_id], closed[quiet.group_id]
    assert trained.trains and trained.reason == "complete" and len(samples) == 4
    # held for review: the feedback (1.0) replaced the judge's 0.0; without the hold the group would have closed on
    # the judge's reward before the feedback was read, and the feedback would have been a late reward
    assert held.reward_mean == 1.0 and held.received == 1 and not held.trains
    assert unlabelled.reward_mean == 0.0 and not unlabelled.trains
    # the training group was not held; the unlabelled served group closed once its hold was over
    waited = (unlabelled.envelope.event_time - trained.envelope.event_time).total_seconds()
    assert waited >= HOLD_S - 1.0, waited
    assert held.envelope.event_time < unlabelled.envelope.event_time  # feedback ended its hold early
