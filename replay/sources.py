"""Where a replay reads history: a broker's topics or the archive, as ``(event, place)`` pairs.

:class:`BrokerHistory` reads a topic from its beginning to its end now, group-less
(:func:`~streamgrpo.topics.follow.iter_topic`: no consumer group joins or commits, so the live run's
groups are untouched); :class:`ArchiveHistory` reads the archive (:func:`~streamgrpo.archive.store.read_events`).
Both give the record's place (partition, offset, key, timestamp) as it was on the source log.

:func:`select_samples` picks a range's TrainingSamples of one adapter family in the CANONICAL order a
replay trains them in: by record timestamp, then partition, then offset. The order is a function of
the log alone (a restored log keeps timestamps), so the same range gives the same batches from the
broker or from the archive. What is not covered: a range past the broker's retention (use the archive).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from streamgrpo.archive.schema import Place
from streamgrpo.archive.store import place_of, read_events
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.replay.ranges import SAMPLES_TOPIC, SampleRange
from streamgrpo.topics import catalog
from streamgrpo.topics.follow import iter_topic
from streamgrpo.topics.received import Received


class History(Protocol):
    """Events of a catalog topic with their places, in offset order per partition."""

    label: str

    def events(self, topic: str) -> Iterator[tuple[R.Event, Place]]: ...


@dataclass(frozen=True)
class BrokerHistory:
    kafka: KafkaSettings
    timeout_s: float = 10.0

    @property
    def label(self) -> str:
        return f"broker {self.kafka.bootstrap} (prefix {self.kafka.topic_prefix!r})"

    def events(self, topic: str) -> Iterator[tuple[R.Event, Place]]:
        for rec in iter_topic(self.kafka, topic, timeout_s=self.timeout_s):
            if rec.event is not None:
                yield rec.event, place_of(rec)


@dataclass(frozen=True)
class ArchiveHistory:
    root: Path

    @property
    def label(self) -> str:
        return f"archive {self.root}"

    def events(self, topic: str) -> Iterator[tuple[R.Event, Place]]:
        return read_events(self.root, topic)


def canonical(place: Place) -> tuple[int, int, int]:
    return (place.timestamp_ms or 0, place.partition, place.offset)


def published(history: History, adapter: str) -> list[R.AdapterPublished]:
    """The AdapterPublished events of ``adapter`` (first copy of each version)."""
    out: dict[int, R.AdapterPublished] = {}
    for event, _ in history.events(catalog.ADAPTER_EVENTS):
        if isinstance(event, R.AdapterPublished) and event.adapter_name == adapter:
            out.setdefault(event.version, event)
    return [out[v] for v in sorted(out)]


def select_samples(history: History, rng: SampleRange, adapter: str) -> list[tuple[R.TrainingSample, Place]]:
    """The TrainingSamples of ``adapter`` inside ``rng``, first copy of each id, in canonical order."""
    chosen: dict[str, tuple[R.TrainingSample, Place]] = {}
    for event, place in history.events(SAMPLES_TOPIC):
        if (isinstance(event, R.TrainingSample) and event.adapter_name == adapter
                and rng.contains(place.partition, place.offset, place.timestamp_ms)):
            chosen.setdefault(event.event_id, (event, place))
    return sorted(chosen.values(), key=lambda item: canonical(item[1]))


def as_received(event: R.Event, place: Place) -> Received:
    """What the trainer's loop reads (the value bytes are not needed: the event is decoded)."""
    return Received(event, place.topic, place.partition, place.offset, place.key, b"", place.timestamp_ms or 0)
