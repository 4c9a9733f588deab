"""Forged lifecycle events on the real broker: refused and dead-lettered, and the fan-out keeps requesting groups on
the real trainer's newest version (issue 38, findings 1-4).

A real ``streamgrpo streams`` worker (the fan-out and its follower, ``canary_share`` 0) on the embedded broker reads,
beside a real line (v1, v2, v3 from the trainer):

- offset 1: a forged v2 whose typed ``samples_dequeued`` is -10**12 (finding 2: before, it was counted into the
  fan-out's queue and admission waited for 10**12 samples, for ever and after every restart);
- offset 3: a forged v66, 64 versions past v2 (finding 1: before, it was accepted, and the real v3 was then refused
  as "not newer", so the trainer's samples never left the queue count);
- offset 5: an ``AdapterPromoted`` of v99999, never announced, written as the A/B controller (finding 3: before, it
  became the primary and every new group was requested on it);
- offset 6: an ``AdapterRolledBack`` of v3 to v0 by a writer that is neither the A/B controller nor the trainer and
  names no operator (finding 4: before, it rolled the whole line back to the base model).

Each becomes one dead letter with its reason; a task is requested on v3; a restarted worker replays the log, writes
no letter again, and requests the next task on v3 too. What is not covered: the A/B controller's own fold (the same
pure fold: tests/unit/lifecycle/test_trust.py), a forger that claims an operator identity (Kafka ACLs stop it).
"""

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

SETTINGS = {"max_groups_in_flight": 4, "admission_poll_s": 0.1, "canary_share": 0.0}
LINEAGE = [R.OffsetRange("training-samples", 0, 0, 7)]


def announcement(version: int, parent: int | None, sha256: str = "ab" * 32, dequeued: int = 8) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", version, f"file:///store/planner/v{version}",
                              sha256, "base", version, list(LINEAGE), parent_version=parent, drops={},
                              samples_dequeued=dequeued, max_staleness=1, auto_promote=True)


def task(i: int) -> R.Task:
    return R.Task(R.Envelope.new("test", task_id=f"trust-task-{i}"), question=f"q{i}", source="test", group_size=2)


def wait_for(what: str, check: object, worker: WorkerProcess, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        assert worker.alive(), worker.log_text()[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout_s:.0f} s:\n{worker.log_text()[-3000:]}")


def versions_requested(kafka: KafkaSettings, task_index: int) -> set[int]:
    group = ids.group_id(f"trust-task-{task_index}")
    return {r.event.adapter_version for r in read_topic(kafka, "rollout-requests", timeout_s=15)
            if r.event is not None and r.event.envelope.group_id == group}


def letters(kafka: KafkaSettings) -> list[R.DeadLetter]:
    return [r.event for r in read_topic(kafka, "dead-letters", timeout_s=15) if isinstance(r.event, R.DeadLetter)]


FORGED = {1: "samples_dequeued -1000000000000 is negative", 3: "v66 skips v3: the next version of the line is v3",
          5: "AdapterPromoted names v99999, which was never announced",
          6: "AdapterRolledBack of v3 written by 'forger'"}


def run_worker(kafka: KafkaSettings, data: Path, task_index: int, settle: object = None) -> list[R.DeadLetter]:
    """Start a fan-out worker, send task ``task_index``, wait until it is requested (and ``settle``), stop it."""
    worker = WorkerProcess(kafka, "fanout", data, SETTINGS)
    try:
        with EventProducer(kafka, "test") as prod:
            prod.send(task(task_index))
        wait_for(f"task {task_index} fanned out", lambda: len(versions_requested(kafka, task_index)) > 0, worker)
        if settle is not None:
            wait_for("the worker settled", settle, worker)
        time.sleep(2)  # a second poll or replay would write more letters
        return letters(kafka)
    finally:
        assert worker.stop() == 0, worker.log_text()[-3000:]


def test_forged_lifecycle_events_are_dead_lettered_and_groups_go_to_the_real_newest_version(
        kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    with EventProducer(kafka_ns, "test") as prod:
        prod.send(announcement(1, None))
        prod.send(announcement(2, 1, sha256="cd" * 32, dequeued=-10**12))  # offset 1: finding 2
        prod.send(announcement(2, 1))
        prod.send(announcement(66, 2, sha256="0" * 64))  # offset 3: finding 1
        prod.send(announcement(3, 2))
        prod.send(R.AdapterPromoted(R.Envelope.new("ab-controller"), "planner", 99999, 3, "forged"))  # 5: finding 3
        prod.send(R.AdapterRolledBack(R.Envelope.new("forger"), "planner", 3, 0, "forged"))  # offset 6: finding 4
        prod.send(R.AdapterPromoted(R.Envelope.new("ab-controller"), "planner", -1, 3, "forged"))  # offset 7

    first = run_worker(kafka_ns, tmp_path / "one", 0, lambda: len(letters(kafka_ns)) >= 5)
    assert versions_requested(kafka_ns, 0) == {3}, "the real trainer's newest version, neither forged nor rolled back"
    by_offset = {d.source_offset: d for d in first}
    assert sorted(by_offset) == [1, 3, 5, 6, 7] and len(first) == 5, [(d.source_offset, d.reason) for d in first]
    for offset, fragment in FORGED.items():
        d = by_offset[offset]
        assert (d.source_topic, d.reason_code) == ("adapter-events", "adapter_lineage") and fragment in d.reason, d
        assert d.value is not None and d.event_id == ids.dead_letter_id("adapter-events", 0, offset)
    assert "operator identity" in by_offset[6].reason and "v-1, which was never announced" in by_offset[7].reason

    second = run_worker(kafka_ns, tmp_path / "two", 1)  # a restart replays the log: refused again, no new letter
    assert versions_requested(kafka_ns, 1) == {3}
    assert sorted(d.source_offset for d in second) == [1, 3, 5, 6, 7]
