"""KILL-AND-RESTART: SIGKILL the streams worker mid-stream, restart it, and count training samples.

Guarantee under test: every rollout of every complete group yields exactly one DISTINCT
TrainingSample id (``derived_id("sample", rollout_id)``) with every planner turn, across a crash.
The emission itself is at-least-once (a sample delivered just before the kill, whose table update
was not yet written, is emitted again with the same id); the trainer de-duplicates by id. The test
prints how many raw duplicates the run produced.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from support.streams import WorkerProcess, synthetic_group

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker
GROUPS = 60
SIZE = 4


def _publish(kafka: KafkaSettings, groups: list, pause_s: float, halfway: threading.Event | None = None) -> None:
    with EventProducer(kafka, "test") as prod:
        for i, g in enumerate(groups):
            for event in g.events():
                prod.send(event)
            prod.flush()
            if halfway is not None and i == len(groups) // 3:
                halfway.set()
            time.sleep(pause_s)


def _samples(kafka: KafkaSettings) -> list[R.TrainingSample]:
    return [r.event for r in read_topic(kafka, "training-samples", timeout_s=10)]


@pytest.mark.fault
def test_kill_and_restart_yields_one_sample_per_rollout(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    groups = [synthetic_group(f"task-{i}", [float((i + j) % 3 == 0) + 0.1 * j for j in range(SIZE)],
                              turns=[1 + (i + j) % 4 for j in range(SIZE)]) for i in range(GROUPS)]
    settings = {"group_timeout_s": 600, "session_timeout_s": 6, "commit_interval_s": 0.5}
    first = WorkerProcess(kafka_ns, "window", tmp_path / "data", settings, tmp_path / "w1.log")
    _publish(kafka_ns, groups[:1], 0)  # warm-up: wait until the worker is processing
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(_samples(kafka_ns)) < SIZE:
        time.sleep(0.3)
    halfway = threading.Event()
    publisher = threading.Thread(target=_publish, args=(kafka_ns, groups[1:], 0.15, halfway))
    publisher.start()
    assert halfway.wait(60)
    first.kill()  # SIGKILL mid-stream: a third of the groups published, the rest still to come
    assert publisher.is_alive(), "the publisher finished before the kill; the kill was not mid-stream"
    before = len(_samples(kafka_ns))
    second = WorkerProcess(kafka_ns, "window", tmp_path / "data", settings, tmp_path / "w2.log")
    try:
        publisher.join()
        deadline = time.monotonic() + 120
        samples = _samples(kafka_ns)
        while time.monotonic() < deadline and len({s.event_id for s in samples}) < SIZE * GROUPS:
            time.sleep(1)
            samples = _samples(kafka_ns)
        time.sleep(3)  # let any late duplicate land before counting
        samples = _samples(kafka_ns)
    finally:
        second.stop()
    ids = Counter(s.event_id for s in samples)
    expected = {rid for g in groups for rid in g.rollout_ids}
    print(f"\nkill-restart: {before} samples before the kill, {len(samples)} raw samples, {len(ids)} distinct, "
          f"{sum(c - 1 for c in ids.values())} duplicates")
    assert {s.envelope.rollout_id for s in samples} == expected, second.log_text()[-3000:]
    assert len(ids) == len(expected)
    turns = Counter(a.envelope.rollout_id for g in groups for a in g.actions)  # planner turns per rollout
    for s in samples:  # duplicates, if any, are identical copies
        assert [t.turn for t in s.turns] == list(range(1, turns[s.envelope.rollout_id] + 1))
    closed = [r.event for r in read_topic(kafka_ns, "groups", timeout_s=10)]
    assert {c.envelope.group_id for c in closed} == {g.group_id for g in groups}
    assert all(c.status == R.GroupStatus.COMPLETE for c in closed)
