"""Kill the broker (memory storage), start a new one, `replay restore`: the topics hold the same events.

A history of every event type is produced to broker A and archived by the real archive agent; A is
stopped (its memory storage loses every topic); broker B starts empty; `streamgrpo replay restore`
re-publishes the archive into B. Every partition of every topic then holds the same records as A did:
same event ids in the same order, same keys, same bytes, same timestamps, even the same offsets. A
second restore publishes nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.history import build
from support.streams import WorkerProcess

from streamgrpo.archive.store import parts
from streamgrpo.config import KafkaSettings
from streamgrpo.replay.cli import replay
from streamgrpo.topics.admin import ensure, existing_topics
from streamgrpo.topics.broker import EmbeddedBroker
from streamgrpo.topics.catalog import TOPICS
from streamgrpo.topics.follow import iter_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker

Snapshot = dict[tuple[str, int], list[tuple[int, str, bytes | None, bytes, int]]]


def snapshot(kafka: KafkaSettings) -> Snapshot:
    """(topic, partition) -> [(offset, event id, key, value bytes, timestamp)] of every catalog topic."""
    out: Snapshot = {}
    for t in TOPICS:
        for r in iter_topic(kafka, t.name):
            assert r.event is not None, r.error
            out.setdefault((t.name, r.partition), []).append((r.offset, r.event.event_id, r.key, r.value,
                                                              r.timestamp_ms))
    return out


@pytest.mark.fault
def test_restore_after_the_broker_lost_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMGRPO_KAFKA__SESSION_TIMEOUT_MS", "3000")
    archive = tmp_path / "archive"
    log, _ = build()
    with EmbeddedBroker(tmp_path / "a") as a:
        kafka_a = KafkaSettings(bootstrap=a.bootstrap, session_timeout_ms=3000)
        ensure(kafka_a)
        with EventProducer(kafka_a, "test") as prod:
            for event, _ in log.records:
                prod.send(event)
        before = snapshot(kafka_a)
        worker = WorkerProcess(kafka_a, "archive", tmp_path / "data", {"archive_dir": archive, "archive_roll_s": 0.5})
        try:
            deadline = time.monotonic() + 120
            while sum(_rows(p) for p in parts(archive)) < len(log.records) and time.monotonic() < deadline:
                assert worker.alive(), worker.log_text()[-3000:]
                time.sleep(0.5)
        finally:
            worker.stop()
    assert sum(_rows(p) for p in parts(archive)) == len(log.records)
    assert sum(len(v) for v in before.values()) == len(log.records) and len({t for t, _ in before}) == len(TOPICS)

    with EmbeddedBroker(tmp_path / "b") as b:  # a new broker: memory storage, nothing survived
        kafka_b = KafkaSettings(bootstrap=b.bootstrap, session_timeout_ms=3000)
        assert existing_topics(kafka_b) == {}
        result = CliRunner().invoke(replay, ["restore", str(archive), "--bootstrap", b.bootstrap], obj={})
        assert result.exit_code == 0, result.output + repr(result.exception)
        assert f"restored {len(log.records)} events" in result.output
        assert all(line.endswith("moved 0") for line in result.output.splitlines() if ": published" in line)
        assert snapshot(kafka_b) == before  # ids, order, keys, bytes, timestamps and offsets per partition
        again = CliRunner().invoke(replay, ["restore", str(archive), "--bootstrap", b.bootstrap], obj={})
        assert again.exit_code == 0 and "restored 0 events" in again.output, again.output
        assert snapshot(kafka_b) == before


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)
