"""Issue 38, findings 5 and 6, on the real broker through a real `streamgrpo streams` window worker: human Rewards
with a score that is not finite (NaN, inf, 1e308 against -1e308) or outside [0, 1] (-5), produced straight to
`rewards` (bypassing the SDK's checks) while the group is held for review, are dead-lettered with a reason; the
worker keeps running and the group closes on the judge's rewards."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from support.streams import WorkerProcess, synthetic_group, wait_for_records

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker

BAD = [(1, math.nan), (2, math.inf), (3, -5.0), (1, 1e308), (2, -1e308)]



def _human(done: R.RolloutCompleted, score: float, n: int) -> R.Reward:
    """A Reward with provenance human:mallory, built by hand (what a foreign producer could write)."""
    env = done.envelope
    return R.Reward(
        envelope=R.Envelope.new("label", event_id=ids.derived_id("bad-label", env.rollout_id or "", str(n)),
                                task_id=env.task_id, group_id=env.group_id, rollout_id=env.rollout_id),
        score=score, status=R.RewardStatus.OK, judge=R.JudgeInfo(name="human:mallory", rubric_hash="human"),
        group_size=done.group_size, adapter_name=done.adapter_name, adapter_version=done.adapter_version,
        turns=done.turns, rollout_status=done.status)


def test_bad_human_scores_under_a_review_hold_are_dead_lettered_and_the_group_closes(
        kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    group = synthetic_group("bad-human", [1.0, 0.0, 0.0, 0.0], turns=[1, 1, 1, 1])
    worker = WorkerProcess(kafka_ns, "window", tmp_path / "data", {"review_hold_s": 6, "tick_interval_s": 0.5})
    try:
        with EventProducer(kafka_ns, "test") as prod:
            for event in group.events():
                prod.send(event)
            for n, (i, score) in enumerate(BAD):
                prod.send(_human(group.completions[i], score, n))
        closed = wait_for_records(kafka_ns, "groups", 1)
        samples = wait_for_records(kafka_ns, "training-samples", 4)
        dead = wait_for_records(kafka_ns, "dead-letters", len(BAD))
        alive = worker.alive()
    finally:
        worker.stop()
    assert alive and len(closed) == 1, worker.log_text()[-3000:]
    c = closed[0].event
    assert c.trains and c.reason == "complete" and c.reward_mean == pytest.approx(0.25)
    by_rollout = {r.event.envelope.rollout_id: r.event.advantage for r in samples}
    assert [by_rollout[r] for r in group.rollout_ids] == pytest.approx(
        build_estimator("grpo")([1.0, 0.0, 0.0, 0.0]).advantages)
    letters = [d.event for d in dead]
    assert len(letters) == len(BAD) and {d.reason_code for d in letters} == {"out_of_bounds"}
    assert {d.source_topic for d in letters} == {"rewards"}
    reasons = " ".join(d.reason for d in letters)
    assert "not a finite number" in reasons and "from 0 (wrong) to 1 (right)" in reasons
