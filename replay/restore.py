"""``replay restore``: re-publish archived events into a broker (e.g. after the embedded broker restarted).

For each archived topic, the events are read back in ``(partition, offset)`` order
(:func:`~streamgrpo.archive.store.read_events`), re-encoded with the current contract (byte for byte the
original record when it was written with the current schema) and produced with
their original key, to their original partition, with their original record timestamp and event id,
by one idempotent producer (``acks=all``, ordered): per-partition order is the archive's. Events already
on the target topic (same event id) are skipped, so restoring twice, or into a broker that kept part
of the log, publishes nothing twice; consumers drop duplicates by id in any case.

Offsets: restored into an empty topic, every record gets its original offset back whenever the archived
partition has no gaps (every record decoded and archived); the report counts the records that landed
elsewhere (``moved``), so lineage offset ranges of adapters stay valid exactly when ``moved`` is 0.
What is not covered: records that never decoded (dead-lettered, never archived), topics whose broker
partition count is smaller than the archive's (refused with the partition named).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamgrpo.archive.store import read_events, topics_in
from streamgrpo.avro.codec import Codec
from streamgrpo.config import KafkaSettings
from streamgrpo.replay.errors import ReplayError
from streamgrpo.topics.catalog import spec
from streamgrpo.topics.clients import client_config, topic_name
from streamgrpo.topics.follow import iter_topic, log_bounds
from streamgrpo.topics.producer import check_size

log = logging.getLogger(__name__)


@dataclass
class TopicRestore:
    topic: str
    published: int = 0
    skipped_present: int = 0
    moved: int = 0  # delivered at an offset other than the archived one
    failures: list[str] = field(default_factory=list)


class _Producer:
    """An idempotent confluent-kafka producer that reports each record's delivered offset."""

    def __init__(self, kafka: KafkaSettings) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(client_config(kafka, **{
            "client.id": f"{kafka.client_id}-replay-restore", "enable.idempotence": True, "acks": "all",
            "linger.ms": 20, "message.timeout.ms": 60_000}))

    def send(self, topic: str, value: bytes, key: bytes | None, partition: int, timestamp_ms: int | None,
             on_delivery: Callable[[Any, Any], None]) -> None:
        from confluent_kafka import KafkaException

        while True:
            try:
                self._producer.produce(topic, value=value, key=key, partition=partition,
                                       timestamp=timestamp_ms or 0, on_delivery=on_delivery)
                break
            except BufferError:
                self._producer.poll(0.1)
            except KafkaException as exc:
                raise ReplayError(f"cannot produce to {topic}: {exc}") from exc
        self._producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> int:
        return int(self._producer.flush(timeout_s))


def ids_on_broker(kafka: KafkaSettings, topic: str) -> set[str]:
    """Event ids already on ``topic`` (decoded records only)."""
    return {r.event.event_id for r in iter_topic(kafka, topic) if r.event is not None}


def restore_topic(root: Path, kafka: KafkaSettings, topic: str, codec: Codec, *, skip_present: bool = True,
                  progress: Callable[[int], None] | None = None) -> TopicRestore:
    """Re-publish the archived events of one topic (see the module docstring)."""
    physical = topic_name(kafka, topic)
    partitions = {p for (_, p) in log_bounds(kafka, [physical])}
    present = ids_on_broker(kafka, topic) if skip_present else set()
    out = TopicRestore(topic)
    producer = _Producer(kafka)

    def delivered(archived_offset: int) -> Callable[[Any, Any], None]:
        def callback(err: Any, msg: Any) -> None:
            if err is not None:
                out.failures.append(f"{topic}[{msg.partition()}]: {err.str()}")
            elif msg.offset() != archived_offset:
                out.moved += 1
        return callback

    for event, place in read_events(root, topic):
        if event.event_id in present:
            out.skipped_present += 1
            continue
        if place.partition not in partitions:
            raise ReplayError(f"{physical} has no partition {place.partition} (it has {len(partitions)}); create the "
                              f"topic with at least {spec(topic).partitions} partitions (`streamgrpo topics ensure`)")
        value = codec.encode(event, physical)
        check_size(event, value)
        producer.send(physical, value, place.key, place.partition, place.timestamp_ms, delivered(place.offset))
        out.published += 1
        if progress is not None:
            progress(1)
    remaining = producer.flush()
    if remaining:
        out.failures.append(f"{remaining} record(s) of {topic} unacknowledged after 60 s")
    if out.failures:
        raise ReplayError(f"{len(out.failures)} record(s) of {topic} were not restored (is the broker at "
                          f"{kafka.bootstrap} up?): " + "; ".join(out.failures[:5]))
    return out


def restore(root: Path, kafka: KafkaSettings, topics: Iterable[str] | None = None, *, skip_present: bool = True,
            progress: Callable[[int], None] | None = None) -> list[TopicRestore]:
    """Ensure the catalog topics on ``kafka``, then restore every archived topic (or ``topics``) in catalog order."""
    from streamgrpo.topics.admin import ensure

    root = Path(root)
    if not root.is_dir():
        raise ReplayError(f"archive {root} does not exist (pass the archive root, e.g. <run dir>/archive)")
    chosen = list(topics) if topics is not None else topics_in(root)
    unknown = [t for t in chosen if t not in topics_in(root)]
    if unknown:
        raise ReplayError(f"nothing archived for {unknown} under {root}; archived topics: {', '.join(topics_in(root))}")
    ensure(kafka)
    codec = Codec(kafka.schema_registry_url)
    return [restore_topic(root, kafka, t, codec, skip_present=skip_present, progress=progress) for t in chosen]
