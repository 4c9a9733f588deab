"""Fan-out on the real broker: group ids, the adapter version per group, admission backpressure."""

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


def requests(kafka: KafkaSettings) -> list[R.RolloutRequest]:
    return [r.event for r in read_topic(kafka, "rollout-requests", timeout_s=10)]


def wait_requests(kafka: KafkaSettings, n: int, timeout_s: float = 60) -> list[R.RolloutRequest]:
    deadline = time.monotonic() + timeout_s
    got = requests(kafka)
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.5)
        got = requests(kafka)
    return got


def task(i: int) -> R.Task:
    return R.Task(R.Envelope.new("test", task_id=f"task-{i}"), question=f"q{i}", source="test", group_size=3)


def test_fanout_versions_and_backpressure(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    worker = WorkerProcess(kafka_ns, "fanout", tmp_path / "data",
                           {"max_groups_in_flight": 2, "max_turns": 4, "admission_poll_s": 0.1})
    try:
        with EventProducer(kafka_ns, "test") as prod:
            for v in (1, 2, 3):  # the line from v1, as the trainer publishes it: v3 is the newest
                prod.send(R.AdapterPublished(R.Envelope.new("trainer"), "planner", v, f"file:///x/v{v}", "0" * 64,
                                             "base", 10 * v, [], parent_version=v - 1 if v > 1 else None))
            prod.flush()
            for i in range(3):
                prod.send(task(i))
        first = wait_requests(kafka_ns, 6)
        time.sleep(3)  # the third group must stay blocked: 2 groups are in flight
        assert len(requests(kafka_ns)) == 6, worker.log_text()[-2000:]
        assert {r.adapter_version for r in first} == {3} and {r.max_turns for r in first} == {4}
        groups = {r.envelope.group_id for r in first}
        assert len(groups) == 2 and groups <= {ids.group_id(f"task-{i}") for i in range(3)}
        for g in groups:
            rids = sorted(r.envelope.rollout_id for r in first if r.envelope.group_id == g)
            assert rids == sorted(ids.rollout_id(g, j) for j in range(3))
        done = sorted(groups)[0]
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(R.GroupClosed(R.Envelope.new("streams", group_id=done), R.GroupStatus.COMPLETE, 3, 3, 0.5,
                                    0.1, "grpo", True, "complete", 3))
            prod.send(task(0))  # redelivered task: its group exists, no second fan-out
        after = wait_requests(kafka_ns, 9)
        time.sleep(2)
        after = requests(kafka_ns)
    finally:
        worker.stop()
    assert len(after) == 9
    assert {r.envelope.group_id for r in after} == {ids.group_id(f"task-{i}") for i in range(3)}
    assert len({r.event_id for r in after}) == 9
