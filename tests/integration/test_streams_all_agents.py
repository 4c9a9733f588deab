"""Every agent in one worker: a Task fans out, the group's synthetic rollouts are scored into samples,
and the archive holds the events."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.streams import WorkerProcess, synthetic_group

from streamgrpo.archive.store import parts
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.streams.archive import query
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def wait(kafka: KafkaSettings, topic: str, n: int, timeout_s: float = 60) -> list[R.Event]:
    deadline = time.monotonic() + timeout_s
    got: list[R.Event] = []
    while time.monotonic() < deadline:
        got = [r.event for r in read_topic(kafka, topic, timeout_s=10) if r.event is not None]
        if len(got) >= n:
            break
        time.sleep(0.5)
    return got


def test_all_agents_in_one_worker(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    worker = WorkerProcess(kafka_ns, "fanout,window,metrics,ab,archive", tmp_path / "data",
                           {"archive_dir": archive, "archive_roll_s": 1, "metrics_window_s": 1,
                            "curriculum": False})  # its group has variance: the curriculum would requeue it
                                                   # (tests/integration/test_streams_curriculum.py)
    try:
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(R.Task(R.Envelope.new("test", task_id="T-all"), question="2+2?", source="math", group_size=3))
        requests = wait(kafka_ns, "rollout-requests", 3)
        assert len(requests) == 3, worker.log_text()[-3000:]
        group = synthetic_group("T-all", [1.0, 0.0, 0.5], turns=[2, 1, 3])
        assert {r.envelope.rollout_id for r in requests} == set(group.rollout_ids)
        with EventProducer(kafka_ns, "test") as prod:
            for event in group.events():
                prod.send(event)
        samples = wait(kafka_ns, "training-samples", 3)
        metrics = wait(kafka_ns, "reward-metrics", 1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not parts(archive / "training-samples"):
            time.sleep(0.5)
    finally:
        worker.stop()
    assert sorted(len(s.turns) for s in samples) == [1, 2, 3]
    assert sum(m.count for m in metrics) >= 1
    _, rows = query(archive, "SELECT count(*) FROM rollout_requests")
    assert rows == [(3,)]
    _, rows = query(archive, "SELECT count(*) FROM training_samples")
    assert rows == [(3,)]
