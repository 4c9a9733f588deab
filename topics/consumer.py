"""Consuming events: a group consumer for services, and a group-less reader for tools and tests.

:class:`EventConsumer` (aiokafka; it joins a consumer group at once on the embedded broker, where
librdkafka's group join took ~20 s — see BENCHMARKS.md) polls batches, decodes them and classifies
failures:

- a record that does not decode, or carries an event type its topic does not carry, goes to
  ``dead-letters`` with source topic/partition/offset and the reason, and consumption carries on;
- a handler that rejects a decoded record calls :meth:`EventConsumer.dead_letter`;
- transient Kafka errors (commit during a rebalance, request timeouts) are logged and retried;
  the records are redelivered and handlers drop duplicates by event id;
- anything else propagates: a bug crashes loudly rather than skipping records.

Offsets are committed only by :meth:`EventConsumer.commit` (never automatically), after pending
dead letters are acknowledged: at-least-once, nothing lost.

:func:`read_topic` reads a whole topic from the beginning without a group (assigns every
partition and stops at the high watermarks): for ``streamgrpo tail``, tests and audits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError, KafkaTimeoutError, RebalanceInProgressError

from streamgrpo.avro.codec import Codec
from streamgrpo.avro.errors import DecodeError
from streamgrpo.avro.records import DeadLetter, Envelope, Event
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.catalog import spec
from streamgrpo.topics.clients import aiokafka_config, logical_name, topic_name
from streamgrpo.topics.producer import EventProducer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Received:
    """One consumed record. ``event`` is None only in :func:`read_topic` results that failed to decode."""

    event: Event | None
    topic: str  # catalog (logical) name
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int
    error: str | None = None


def dead_letter_event(
    service: str, consumer: str, topic: str, partition: int, offset: int,
    key: bytes | None, value: bytes | None, reason_code: str, reason: str,
) -> DeadLetter:
    """The DeadLetter for one record. Its id is deterministic, so a redelivered bad record is one DLQ entry."""
    from streamgrpo.avro.records import derived_id

    return DeadLetter(
        envelope=Envelope.new(service, event_id=derived_id("dead_letter", consumer, topic, partition, offset)),
        source_topic=topic, source_partition=partition, source_offset=offset,
        reason_code=reason_code, reason=reason[:2000], consumer=consumer, key=key, value=value,
    )


def decode_record(codec: Codec, topic: str, value: bytes | None) -> tuple[Event | None, str | None, str | None]:
    """Decode and check the event type against the topic. Returns (event, reason_code, reason)."""
    try:
        event = codec.decode(value or b"")
    except DecodeError as exc:
        return None, "decode_error", str(exc)
    allowed = spec(topic).event_types if topic in _catalog_names() else None
    if allowed is not None and event.SCHEMA_NAME not in allowed:
        return None, "wrong_event_type", f"{event.SCHEMA_NAME} does not belong on topic {topic}"
    return event, None, None


def _catalog_names() -> set[str]:
    from streamgrpo.topics.catalog import CATALOG

    return set(CATALOG)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: EventConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        if self.owner.commit_on_revoke:
            await self.owner._commit_quietly()
        for tp in revoked:
            self.owner._pending.pop(tp, None)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        log.info("%s assigned %s", self.owner.group_id, sorted((tp.topic, tp.partition) for tp in assigned))


class EventConsumer:
    """Group consumer of decoded events with dead-letter routing and explicit commits."""

    def __init__(
        self,
        kafka: KafkaSettings,
        group_id: str,
        topics: list[str],
        service: str,
        *,
        from_beginning: bool = True,
        codec: Codec | None = None,
        dlq: EventProducer | None = None,
        commit_on_revoke: bool = True,
        **aiokafka_overrides: Any,
    ) -> None:
        self.kafka = kafka
        self.group_id = group_id
        self.topics = topics
        self.service = service
        self.codec = codec or Codec(kafka.schema_registry_url)
        self._dlq = dlq
        self._owns_dlq = dlq is None
        # False for consumers whose commits must wait for their own milestone (the trainer commits only
        # after the adapter that used the records is announced): a revoke then drops, never commits.
        self.commit_on_revoke = commit_on_revoke
        self._pending: dict[TopicPartition, int] = {}
        self._dlq_pending = False
        self.dead_lettered = 0
        kwargs = dict(
            aiokafka_config(kafka),
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
            max_poll_interval_ms=600_000,
            session_timeout_ms=kafka.session_timeout_ms,
            heartbeat_interval_ms=max(100, min(3_000, kafka.session_timeout_ms // 3)),
        )
        kwargs.update(aiokafka_overrides)
        self._consumer = AIOKafkaConsumer(**kwargs)

    async def start(self) -> None:
        if self._dlq is None:
            self._dlq = EventProducer(self.kafka, self.service, self.codec)
        self._consumer.subscribe([topic_name(self.kafka, t) for t in self.topics], listener=_Listener(self))
        await self._consumer.start()

    async def stop(self) -> None:
        try:
            await self._consumer.stop()
        finally:
            if self._owns_dlq and self._dlq is not None:
                await asyncio.to_thread(self._dlq.flush)

    async def __aenter__(self) -> EventConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def batches(self, max_records: int = 100, timeout_ms: int = 500) -> AsyncIterator[list[Received]]:
        """Yield decoded batches forever (an empty list on an idle poll); bad records go to dead-letters."""
        while True:
            yield await self.poll(max_records, timeout_ms)

    async def poll(self, max_records: int = 100, timeout_ms: int = 500) -> list[Received]:
        try:
            records = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except KafkaTimeoutError as exc:
            log.warning("poll timed out (%s); retrying", exc)
            return []
        out: list[Received] = []
        for tp, msgs in records.items():
            topic = logical_name(self.kafka, tp.topic)
            for m in msgs:
                self._pending[tp] = m.offset + 1
                event, code, reason = decode_record(self.codec, topic, m.value)
                if event is None:
                    self._send_dead_letter(topic, m.partition, m.offset, m.key, m.value, code or "?", reason or "")
                    continue
                out.append(Received(event, topic, m.partition, m.offset, m.key, m.value, m.timestamp))
        return out

    def _send_dead_letter(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, code: str, reason: str
    ) -> None:
        assert self._dlq is not None, "consumer not started"
        log.warning("dead-letter %s[%d]@%d: %s: %s", topic, partition, offset, code, reason)
        self._dlq.send(dead_letter_event(self.service, self.group_id, topic, partition, offset, key, value, code, reason))
        self._dlq_pending = True
        self.dead_lettered += 1

    async def dead_letter(self, received: Received, reason_code: str, reason: str) -> None:
        """Reject a decoded record: it goes to dead-letters with the reason (acknowledged before the next commit)."""
        self._send_dead_letter(
            received.topic, received.partition, received.offset, received.key, received.value, reason_code, reason
        )

    async def commit(self) -> None:
        """Commit everything polled so far, after pending dead letters are acknowledged."""
        if self._dlq_pending and self._dlq is not None:
            await asyncio.to_thread(self._dlq.flush)
            self._dlq_pending = False
        if not self._pending:
            return
        offsets, self._pending = dict(self._pending), {}
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, RebalanceInProgressError) as exc:
            log.warning("commit failed during a rebalance (%s); records will be redelivered", exc)

    async def _commit_quietly(self) -> None:
        try:
            await self.commit()
        except KafkaError as exc:
            log.warning("commit before revoke failed: %s", exc)

    def assignment(self) -> set[TopicPartition]:
        return set(self._consumer.assignment())


def read_topic(
    kafka: KafkaSettings,
    topic: str,
    *,
    timeout_s: float = 10.0,
    limit: int | None = None,
    codec: Codec | None = None,
) -> list[Received]:
    """Every record of ``topic`` from the beginning up to its current end (group-less)."""
    return list(iter_topic(kafka, topic, timeout_s=timeout_s, limit=limit, codec=codec))


def iter_topic(
    kafka: KafkaSettings,
    topic: str,
    *,
    timeout_s: float = 10.0,
    limit: int | None = None,
    follow: bool = False,
    from_beginning: bool = True,
    codec: Codec | None = None,
) -> Iterator[Received]:
    """Yield records of ``topic`` (decoded where possible) until its end, or forever with ``follow``."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer
    from confluent_kafka import TopicPartition as CTP

    from streamgrpo.topics.clients import client_config

    codec = codec or Codec(kafka.schema_registry_url)
    physical = topic_name(kafka, topic)
    consumer = Consumer(client_config(kafka, **{"group.id": "streamgrpo-reader", "enable.auto.commit": False}))
    try:
        md = consumer.list_topics(physical, timeout=timeout_s).topics.get(physical)
        if md is None or md.error is not None or not md.partitions:
            from streamgrpo.topics.errors import TopicsError

            raise TopicsError(f"topic {physical} does not exist; run `streamgrpo topics ensure`")
        parts = sorted(md.partitions)
        ends = end_offsets(consumer, physical, parts, timeout_s)
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([CTP(physical, p, start) for p in parts])
        done = {p for p in parts if ends[p] == 0} if not follow else set()
        count = 0
        idle_deadline = time.monotonic() + timeout_s
        while follow or len(done) < len(parts):
            msg = consumer.poll(timeout=min(1.0, timeout_s))
            if msg is None:
                if not follow and time.monotonic() > idle_deadline:
                    from streamgrpo.topics.errors import TopicsError

                    raise TopicsError(f"no progress reading {physical} for {timeout_s}s (broker down?)")
                continue
            idle_deadline = time.monotonic() + timeout_s
            if msg.error():
                continue
            event, _, reason = decode_record(codec, topic, msg.value())
            partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            yield Received(event, topic, partition, offset, msg.key(), msg.value() or b"",
                           msg.timestamp()[1], error=reason)
            count += 1
            if limit is not None and count >= limit:
                return
            if not follow and offset + 1 >= ends[partition]:
                done.add(partition)
    finally:
        consumer.close()


def end_offsets(consumer: Any, physical: str, partitions: list[int], timeout_s: float = 10.0) -> dict[int, int]:
    """The true log-end offset of each partition (``confluent_kafka.Consumer`` given).

    The high watermark is read first; then the last record batch is read from ``hwm - 1`` to its
    end. On Apache Kafka that reads one record per partition. On the embedded Tansu 0.6 it is
    needed: Tansu reports the high watermark as the *base offset of the last batch + 1*, so after a
    batched produce it lags behind the real end (see BENCHMARKS.md / README, "embedded broker").
    """
    from confluent_kafka import TopicPartition as CTP

    ends = {p: consumer.get_watermark_offsets(CTP(physical, p), timeout=timeout_s)[1] for p in partitions}
    probe = [CTP(physical, p, ends[p] - 1) for p in partitions if ends[p] > 0]
    if not probe:
        return ends
    consumer.assign(probe)
    idle_until = time.monotonic() + 0.5
    while time.monotonic() < idle_until:
        msg = consumer.poll(timeout=0.1)
        if msg is None or msg.error():
            continue
        ends[msg.partition()] = max(ends[msg.partition()], msg.offset() + 1)
        idle_until = time.monotonic() + 0.3
    consumer.unassign()
    return ends
