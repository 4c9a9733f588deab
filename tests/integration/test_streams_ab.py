"""A/B controller on the real broker: a better canary is promoted, a worse one rolled back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.streams import WorkerProcess

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def closed(task: str, version: int, mean: float) -> R.GroupClosed:
    g = ids.group_id(task)
    return R.GroupClosed(R.Envelope.new("streams", event_id=ids.group_closed_id(g), group_id=g), R.GroupStatus.COMPLETE,
                         4, 4, mean, 0.1, "grpo", True, "complete", version)


def publish(v: int) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", v, f"file:///a/{v}", "0" * 64, "base", v, [])


def decisions(kafka: KafkaSettings, n: int, timeout_s: float = 60) -> list[R.Event]:
    deadline = time.monotonic() + timeout_s
    out: list[R.Event] = []
    while time.monotonic() < deadline:
        out = [r.event for r in read_topic(kafka, "adapter-events", timeout_s=10)
               if isinstance(r.event, (R.AdapterPromoted, R.AdapterRolledBack))]
        if len(out) >= n:
            break
        time.sleep(0.5)
    return out


def test_ab_promotes_then_rolls_back(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    worker = WorkerProcess(kafka_ns, "ab", tmp_path / "data",
                           {"canary_share": 0.5, "ab_min_groups": 3, "ab_min_gain": 0.05, "ab_max_loss": 0.05})
    try:
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(publish(1))
            for i in range(3):
                prod.send(closed(f"p{i}", 0, 0.2))
                prod.send(closed(f"c{i}", 1, 0.6))
        first = decisions(kafka_ns, 1)
        assert len(first) == 1 and isinstance(first[0], R.AdapterPromoted), worker.log_text()[-2000:]
        assert (first[0].version, first[0].previous_version) == (1, 0)
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(publish(2))
            for i in range(3):
                prod.send(closed(f"c2-{i}", 2, 0.1))
        both = decisions(kafka_ns, 2)
    finally:
        worker.stop()
    assert len(both) == 2 and isinstance(both[1], R.AdapterRolledBack)
    assert (both[1].version, both[1].restored_version) == (2, 1)
