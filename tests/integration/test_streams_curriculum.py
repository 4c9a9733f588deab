"""The curriculum on the real broker: a task whose group had reward variance is fanned out again, one
whose group had none is parked and retried, each new group's requests saying why (metadata). A task
already served elsewhere (``metadata["served_by"]``) is not fanned out."""

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


def wait_groups(kafka: KafkaSettings, n: int, timeout_s: float = 60) -> dict[str, list[R.RolloutRequest]]:
    deadline = time.monotonic() + timeout_s
    while True:
        by_group: dict[str, list[R.RolloutRequest]] = {}
        for r in requests(kafka):
            by_group.setdefault(r.envelope.group_id or "", []).append(r)
        if len(by_group) >= n or time.monotonic() > deadline:
            return by_group
        time.sleep(0.5)


def closed(task_id: str, attempt: int, mean: float, trains: bool) -> R.GroupClosed:
    gid = ids.group_id(task_id, attempt)
    return R.GroupClosed(R.Envelope.new("streams", task_id=task_id, group_id=gid), R.GroupStatus.COMPLETE, 2, 2,
                         mean, 0.5 if trains else 0.0, "grpo", trains, "complete", 0)


def test_signal_tasks_are_requeued_and_flat_ones_retried_with_the_reason_in_the_requests(
        kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    worker = WorkerProcess(kafka_ns, "fanout", tmp_path / "data",
                           {"max_groups_in_flight": 8, "admission_poll_s": 0.1, "curriculum_park_after": 1,
                            "curriculum_requeue_max": 2})
    try:
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(R.Task(R.Envelope.new("test", task_id="served"), question="q", source="mcp:test",
                             group_size=1, metadata={"served_by": "mcp"}))  # already run by `serve`: not fanned out
            for i in range(2):
                prod.send(R.Task(R.Envelope.new("test", task_id=f"task-{i}"), question=f"q{i}", source="test",
                                 group_size=2, metadata={"kind": "arithmetic"}))
        first = wait_groups(kafka_ns, 2)
        assert set(first) == {ids.group_id("task-0"), ids.group_id("task-1")}, worker.log_text()[-2000:]
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(closed("task-0", 0, 0.5, True))  # signal: requeued at once
            prod.send(closed("task-1", 0, 0.0, False))  # no signal: parked for 1 admitted group
        groups = wait_groups(kafka_ns, 4)
        requeued, retried = groups.get(ids.group_id("task-0", 1)), groups.get(ids.group_id("task-1", 1))
        assert requeued and retried, (sorted(groups), worker.log_text()[-3000:])
        assert {(r.metadata["curriculum"], r.metadata["pass_rate"], r.metadata["attempt"]) for r in requeued} == {
            ("requeue", "0.500", "1")}
        assert {(r.metadata["curriculum"], r.metadata["attempt"]) for r in retried} == {("retry", "1")}
        assert all(r.metadata["kind"] == "arithmetic" and r.question == "q0" for r in requeued)
        with EventProducer(kafka_ns, "test") as prod:  # requeue_max = 2 groups: task-0 is retired
            prod.send(closed("task-0", 1, 0.5, True))
            prod.send(closed("task-1", 1, 0.0, False))  # one retry only
        time.sleep(4)
        final = wait_groups(kafka_ns, 5, timeout_s=2)
    finally:
        worker.stop()
    assert len(final) == 4 and ids.group_id("served") not in final, sorted(final)
