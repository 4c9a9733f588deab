"""Two window workers share the consumer group: co-partitioned inputs (rewards, planner-actions,
rollouts keyed by group_id) must land on the same worker, so every rollout still gets its sample."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.streams import WorkerProcess, synthetic_group

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def test_two_workers_split_partitions(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    groups = [synthetic_group(f"scale-{i}", [float(j == i % 4) for j in range(4)], turns=[1, 2, 3, 1])
              for i in range(24)]
    workers = [WorkerProcess(kafka_ns, "window", tmp_path / f"data{i}", {"group_timeout_s": 600},
                             tmp_path / f"w{i}.log") for i in range(2)]
    try:
        time.sleep(8)  # both members join before the load starts (assignment then splits partitions)
        with EventProducer(kafka_ns, "test") as prod:
            for g in groups:
                for event in g.events():
                    prod.send(event)
        deadline = time.monotonic() + 90
        samples: list = []
        while time.monotonic() < deadline and len({s.event.event_id for s in samples}) < 96:
            time.sleep(1)
            samples = read_topic(kafka_ns, "training-samples", timeout_s=10)
    finally:
        logs = [w.log_text()[-1500:] for w in workers]
        for w in workers:
            w.stop()
    expected = {rid for g in groups for rid in g.rollout_ids}
    assert {s.event.envelope.rollout_id for s in samples} == expected, "\n".join(logs)
    emitters = {s.event.envelope.producer.instance for s in samples}
    assert len(emitters) == 2, f"one worker did all the work: {emitters}"  # the partitions were split
