"""Forged or broken ``adapter-events`` records become dead letters, once each, and the loop keeps serving its primary.

The issue's forged announcement (version 2147483647, a sha256 of zeros, no files), a self-parent and bytes that are
no event are written to ``adapter-events`` beside a real line (v1, v2). A real ``streamgrpo streams`` worker (the
fan-out and its follower) on the embedded broker: every new group is requested on v2, and ``dead-letters`` holds
exactly one letter per bad record with its reason. A restarted worker replays the log and writes none again; an
announcement of v2 with another sha256 written while it runs is dead-lettered at once. Before, the fold ignored the
refused announcements silently (a WARNING log line) and nothing was dead-lettered.

A forged announcement that follows the lineage is accepted by the fold; the A/B controller finds that its files do
not verify in the adapter store and rolls it back (the second test), also in a worker without the window (the third:
such a worker has no table, so Faust's own partition assignor, whose record the controller read to know whether it
leads, is not used; before, the controller there never led: no rollback, no verdict, no AdapterState, no error).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.adapter_files import write_version
from support.streams import WorkerProcess

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.clients import topic_name
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker

SETTINGS = {"max_groups_in_flight": 4, "admission_poll_s": 0.1, "canary_share": 0.0}


def announcement(version: int, parent: int | None, sha256: str = "ab" * 32, uri: str | None = None
                 ) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", version, uri or f"file:///store/planner/v{version}",
                              sha256, "base", version, [], parent_version=parent)


def task(i: int) -> R.Task:
    return R.Task(R.Envelope.new("test", task_id=f"refusal-task-{i}"), question=f"q{i}", source="test", group_size=2)


def wait_for(what: str, check: object, worker: WorkerProcess, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        assert worker.alive(), worker.log_text()[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout_s:.0f} s:\n{worker.log_text()[-3000:]}")


def versions_requested(kafka: KafkaSettings, task_index: int) -> set[int]:
    group = ids.group_id(f"refusal-task-{task_index}")
    return {r.event.adapter_version for r in read_topic(kafka, "rollout-requests", timeout_s=15)
            if r.event is not None and r.event.envelope.group_id == group}


def letters(kafka: KafkaSettings) -> list[R.DeadLetter]:
    return [r.event for r in read_topic(kafka, "dead-letters", timeout_s=15) if isinstance(r.event, R.DeadLetter)]


def test_bad_adapter_events_are_dead_lettered_once_and_the_primary_still_serves(
        kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    with EventProducer(kafka_ns, "test") as prod:
        prod.send(announcement(1, None))
        prod.send(announcement(2, 1))
        prod.send(announcement(2147483647, 2, sha256="0" * 64, uri="file:///nowhere"))  # offset 2: forged
        prod.send(announcement(3, 3))  # offset 3: names itself as its parent
        prod.send_raw(topic_name(kafka_ns, "adapter-events"), b"not an event", "planner")  # offset 4
        prod.send(task(0))
    bad = {2: ("adapter_lineage", "jumps more than 64 versions"), 3: ("adapter_lineage", "v3 names itself"),
           4: ("decode_error", "")}

    worker = WorkerProcess(kafka_ns, "fanout", tmp_path / "one", SETTINGS)
    try:
        wait_for("task 0 fanned out", lambda: len(versions_requested(kafka_ns, 0)) > 0, worker)
        wait_for("three dead letters", lambda: len(letters(kafka_ns)) >= 3, worker)
        time.sleep(2)  # a second poll or replay would write more
        first = letters(kafka_ns)
    finally:
        assert worker.stop() == 0, worker.log_text()[-3000:]
    assert versions_requested(kafka_ns, 0) == {2}  # the real primary, never the forged version
    assert len(first) == 3, [(d.source_offset, d.reason) for d in first]
    for d in first:
        code, fragment = bad[d.source_offset]
        assert (d.source_topic, d.source_partition, d.reason_code) == ("adapter-events", 0, code), d
        assert fragment in d.reason and d.value is not None and d.consumer, d
        assert d.event_id == ids.dead_letter_id("adapter-events", 0, d.source_offset)
    assert "2147483647" in next(d.reason for d in first if d.source_offset == 2)

    worker = WorkerProcess(kafka_ns, "fanout", tmp_path / "two", SETTINGS)
    try:
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(task(1))
        wait_for("task 1 fanned out", lambda: len(versions_requested(kafka_ns, 1)) > 0, worker)
        wait_for("the restart skipping what was dead-lettered",
                 lambda: "were dead-lettered before this start; not again" in worker.log_text(), worker)
        with EventProducer(kafka_ns, "test") as prod:  # offset 5: v2 again with other content, met live
            prod.send(announcement(2, 1, sha256="cd" * 32))
            prod.send(task(2))
        wait_for("the live refusal dead-lettered", lambda: len(letters(kafka_ns)) >= 4, worker)
        wait_for("task 2 fanned out", lambda: len(versions_requested(kafka_ns, 2)) > 0, worker)
        time.sleep(2)
        second = letters(kafka_ns)
    finally:
        assert worker.stop() == 0, worker.log_text()[-3000:]
    assert versions_requested(kafka_ns, 1) == versions_requested(kafka_ns, 2) == {2}
    assert sorted(d.source_offset for d in second) == [2, 3, 4, 5], [(d.source_offset, d.reason) for d in second]
    live = next(d for d in second if d.source_offset == 5)
    assert live.reason_code == "adapter_lineage" and "v2 was announced with sha256 abababababab" in live.reason


def test_a_forged_announcement_that_follows_the_lineage_is_rolled_back_and_groups_go_to_its_parent(
        kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    """The next version, an announced parent, a sha256 of zeros and no files: the fold accepts it (it cannot read
    files) and made it the primary; the A/B controller checks its files and rolls it back to v1."""
    store = tmp_path / "adapters"
    uri1, sha1 = write_version(store, 1)
    with EventProducer(kafka_ns, "test") as prod:
        prod.send(announcement(1, None, sha256=sha1, uri=uri1))
        prod.send(announcement(2, 1, sha256="0" * 64, uri=(store / "planner" / "v2").as_uri()))
        prod.send(task(0))  # the worker joins its group once the topics it consumes exist
    settings = {**SETTINGS, "adapter_store": store, "adapter_verify_grace_s": 1.0, "tick_interval_s": 0.2}
    worker = WorkerProcess(kafka_ns, "fanout,window,ab", tmp_path / "data", settings)

    def rollbacks() -> list[R.AdapterRolledBack]:
        return [r.event for r in read_topic(kafka_ns, "adapter-events", timeout_s=15)
                if isinstance(r.event, R.AdapterRolledBack)]

    try:
        wait_for("the forged v2 rolled back", lambda: len(rollbacks()) > 0, worker)
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(task(1))
        wait_for("task 1 fanned out", lambda: len(versions_requested(kafka_ns, 1)) > 0, worker)
        time.sleep(2)  # a second decision would write another rollback
        [rolled] = rollbacks()
    finally:
        assert worker.stop() == 0, worker.log_text()[-3000:]
    assert (rolled.version, rolled.restored_version, rolled.decided_by) == (2, 1, "ab-controller")
    assert "do not verify in the adapter store" in rolled.reason and "missing adapter_config.json" in rolled.reason
    assert versions_requested(kafka_ns, 1) == {1}, "a group after the rollback goes to the restored primary"


@pytest.mark.parametrize("only", ["ab", "fanout,ab"])
def test_the_ab_controller_leads_in_a_worker_without_the_window(kafka_ns: KafkaSettings, tmp_path: Path,
                                                                only: str) -> None:
    """``--only ab`` and ``--only fanout,ab``: the one worker holds ``adapter-events`` and leads. It rolls the forged
    v2 back to v1 and publishes AdapterStates on ``adapter-registry``; with the fan-out, a later group goes to v1.

    Why it failed before: Faust 0.15's aiokafka driver installs Faust's partition assignor only in an app with
    changelog tables (only the window has them) and aiokafka's round-robin assignor otherwise, so
    ``app.assignor.assigned_actives()``, which ``leads()`` read, stayed empty while the consumer held every partition;
    the fan-out ran, the controller never decided. Not covered here: the lease moving between several workers."""
    store = tmp_path / "adapters"
    uri1, sha1 = write_version(store, 1)
    with EventProducer(kafka_ns, "test") as prod:
        prod.send(announcement(1, None, sha256=sha1, uri=uri1))
        prod.send(announcement(2, 1, sha256="0" * 64, uri=(store / "planner" / "v2").as_uri()))
    settings = {**SETTINGS, "adapter_store": store, "adapter_verify_grace_s": 1.0, "tick_interval_s": 0.2,
                "registry_interval_s": 0.5}
    worker = WorkerProcess(kafka_ns, only, tmp_path / "data", settings)

    def rollbacks() -> list[R.AdapterRolledBack]:
        return [r.event for r in read_topic(kafka_ns, "adapter-events", timeout_s=15)
                if isinstance(r.event, R.AdapterRolledBack)]

    def states() -> list[R.AdapterState]:
        return [r.event for r in read_topic(kafka_ns, "adapter-registry", timeout_s=15)
                if isinstance(r.event, R.AdapterState)]

    try:
        wait_for("the forged v2 rolled back by the only worker", lambda: len(rollbacks()) > 0, worker)
        wait_for("AdapterStates published", lambda: len(states()) > 0, worker)
        if "fanout" in only:
            with EventProducer(kafka_ns, "test") as prod:
                prod.send(task(1))
            wait_for("task 1 fanned out", lambda: len(versions_requested(kafka_ns, 1)) > 0, worker)
    finally:
        assert worker.stop() == 0, worker.log_text()[-3000:]
    [rolled] = rollbacks()
    assert (rolled.version, rolled.restored_version, rolled.decided_by) == (2, 1, "ab-controller")
    if "fanout" in only:
        assert versions_requested(kafka_ns, 1) == {1}
