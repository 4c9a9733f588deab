"""Advantage window + sample assembly on the real broker, through a real `streamgrpo streams` worker.

One worker per estimator: each run publishes a complete group, a zero-variance group, a group with an
ERROR reward, a partial group (times out after 3 s) and an undecodable record, then checks every
event the worker derived.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.streams import WorkerProcess, synthetic_group, wait_for_records

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker



@pytest.mark.parametrize("estimator,policy", [("grpo", "score"), ("dr_grpo", "drop"), ("rloo", "score")])
def test_window_emits_formula_advantages(kafka_ns: KafkaSettings, tmp_path: Path, estimator: str, policy: str) -> None:
    complete = synthetic_group("complete", [1.0, 0.0, 0.5, 0.25], turns=[1, 5, 2, 3])
    flat = synthetic_group("flat", [1.0, 1.0, 1.0], turns=[1, 1, 2])
    with_error = synthetic_group("with-error", [1.0, 0.0, 0.0, 0.0], errors=[3], turns=[2, 2, 2, 2])
    partial = synthetic_group("partial", [0.0, 1.0, 0.5, None], turns=[1, 2, 3, 1])
    worker = WorkerProcess(kafka_ns, "window", tmp_path / "data", {
        "estimator": estimator, "partial_policy": policy, "group_timeout_s": 3, "tick_interval_s": 0.5,
        "min_group_size": 2})
    try:
        with EventProducer(kafka_ns, "test") as prod:
            for group in (complete, flat, with_error, partial):
                for event in group.events():
                    prod.send(event)
            prod.send(complete.rewards[0])  # a redelivered reward
            prod.send_raw(f"{kafka_ns.topic_prefix}rewards", b"not avro", b"k")
        n_samples = 4 + 3 + (3 if policy == "score" else 0)
        closed = {r.event.envelope.group_id: r.event for r in wait_for_records(kafka_ns, "groups", 4)}
        samples = wait_for_records(kafka_ns, "training-samples", n_samples)
        dead = wait_for_records(kafka_ns, "dead-letters", 1)
    finally:
        worker.stop()
    assert len(closed) == 4, worker.log_text()[-3000:]
    est = build_estimator(estimator)
    by_rollout = {r.event.envelope.rollout_id: r.event for r in samples}
    assert len(samples) == len(by_rollout) == n_samples

    # complete group: advantages equal the formula; every turn, in order
    want = est([1.0, 0.0, 0.5, 0.25])
    for i, rid in enumerate(complete.rollout_ids):
        s = by_rollout[rid]
        assert s.advantage == pytest.approx(want.advantages[i], abs=1e-9)
        assert [t.turn for t in s.turns] == list(range(1, [1, 5, 2, 3][i] + 1))
        assert s.turns[0].prompt_token_ids == [i, 1, 1, 2] and s.estimator == estimator
        assert s.group_mean == pytest.approx(want.mean) and s.reward == [1.0, 0.0, 0.5, 0.25][i]
    c = closed[complete.group_id]
    assert c.status == R.GroupStatus.COMPLETE and c.trains and c.received == 4

    # zero variance: closed, not trained, no samples
    f = closed[flat.group_id]
    assert not f.trains and f.reason == "zero_variance"
    assert not any(s.envelope.group_id == flat.group_id for s in by_rollout.values())

    # ERROR reward: completes the group but gets no sample; the others use the 3 usable rewards
    e = closed[with_error.group_id]
    assert e.status == R.GroupStatus.COMPLETE and e.received == 4 and e.trains
    assert with_error.rollout_ids[3] not in by_rollout
    assert by_rollout[with_error.rollout_ids[0]].advantage == pytest.approx(est([1.0, 0.0, 0.0]).advantages[0])

    # partial group: timed out, missing rollout listed, policy followed
    p = closed[partial.group_id]
    assert p.status == R.GroupStatus.TIMED_OUT and p.missing_rollout_ids == [partial.rollout_ids[3]]
    assert p.trains is (policy == "score")
    if policy == "score":
        assert by_rollout[partial.rollout_ids[1]].advantage == pytest.approx(est([0.0, 1.0, 0.5]).advantages[1])

    # undecodable record -> dead letter with its source coordinates
    d = dead[0].event
    assert d.source_topic == "rewards" and d.reason_code == "decode_error"  # catalog name, as every consumer writes it
    assert d.event_id == ids.dead_letter_id("rewards", d.source_partition, d.source_offset)
    assert d.value == b"not avro" and d.source_offset >= 0


def test_a_review_hold_lets_a_human_label_change_the_advantages(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    """[streams] review_hold_s keeps a complete group open for labels: a label written with the SDK after every
    judge reward arrived replaces the judge's reward in the advantages; a group nobody labels still closes (the
    hold is bounded) on the judge's rewards."""
    from streamgrpo.topics.sdk import Label, label_rollouts

    labelled = synthetic_group("labelled", [1.0, 0.0, 0.0, 0.0], turns=[1, 1, 1, 1])
    unlabelled = synthetic_group("unlabelled", [1.0, 0.0, 0.0, 0.0], turns=[1, 1, 1, 1])
    worker = WorkerProcess(kafka_ns, "window", tmp_path / "data", {"review_hold_s": 8, "tick_interval_s": 0.5})
    try:
        with EventProducer(kafka_ns, "test") as prod:
            for group in (labelled, unlabelled):
                for event in group.events():
                    prod.send(event)
        time.sleep(2)  # every judge reward is in: without the hold both groups would have closed by now
        [sent] = label_rollouts(kafka_ns, [Label(labelled.rollout_ids[1], 1.0)], by="ada")
        samples = wait_for_records(kafka_ns, "training-samples", 8)
        closed = {r.event.envelope.group_id: r.event for r in wait_for_records(kafka_ns, "groups", 2)}
    finally:
        worker.stop()
    assert sent.judge.name == "human:ada"
    assert len(closed) == 2 and all(c.trains for c in closed.values()), worker.log_text()[-3000:]
    by_rollout = {r.event.envelope.rollout_id: r.event for r in samples}
    est = build_estimator("grpo")
    relabelled = est([1.0, 1.0, 0.0, 0.0]).advantages
    assert [by_rollout[r].advantage for r in labelled.rollout_ids] == pytest.approx(relabelled)
    assert by_rollout[labelled.rollout_ids[1]].reward == 1.0
    judged = est([1.0, 0.0, 0.0, 0.0]).advantages
    assert [by_rollout[r].advantage for r in unlabelled.rollout_ids] == pytest.approx(judged)
