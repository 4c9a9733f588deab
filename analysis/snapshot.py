"""The topics as an archive: a live snapshot for ``analyse`` when no archive exists, and ``replay sync``.

:func:`snapshot` reads every existing catalog topic from its beginning up to its end now (the
group-less :func:`~streamgrpo.topics.follow.iter_topic`), writes the decoded events with the archive
writer into ``root`` (events it already holds are skipped by id) and returns the number newly archived; every view and report then runs on it exactly
as on the durable archive. What is not covered: records past the end at the time each topic was read,
records that do not decode (they are dead-lettered by the topics' consumers), events that Kafka has
already expired (only the archive keeps those).
"""

from __future__ import annotations

from pathlib import Path

from streamgrpo.archive.store import ArchiveWriter, place_of
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.catalog import TOPICS
from streamgrpo.topics.clients import topic_name
from streamgrpo.topics.follow import iter_topic, log_bounds


def snapshot(kafka: KafkaSettings, root: Path, timeout_s: float = 10.0) -> int:
    """Archive every record of every existing catalog topic into ``root``; returns the events archived."""
    existing = {t for t, _ in log_bounds(kafka, [topic_name(kafka, t.name) for t in TOPICS])}
    writer = ArchiveWriter(Path(root), roll_records=10_000_000, roll_s=1e9)
    for t in TOPICS:
        if topic_name(kafka, t.name) not in existing:
            continue
        for rec in iter_topic(kafka, t.name, timeout_s=timeout_s):
            if rec.event is not None:
                writer.add(rec.event, place_of(rec))
            if writer.pending >= 20_000:
                writer.flush()
    writer.flush()
    return writer.written
