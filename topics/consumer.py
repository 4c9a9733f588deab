"""The group consumer of the services: decode, classify failures, commit explicitly.

:class:`EventConsumer` (aiokafka; it joins a consumer group at once on the embedded broker, where
librdkafka's group join took ~20 s — see BENCHMARKS.md) polls batches, decodes them and classifies
failures:

- a record that does not decode, or carries an event type its topic does not carry, goes to
  ``dead-letters`` (:func:`~streamgrpo.topics.dead_letter.dead_letter`: bounded, with the reason)
  and consumption carries on;
- a handler that rejects a decoded record calls :meth:`EventConsumer.dead_letter`;
- transient Kafka errors (commit during a rebalance, request timeouts) are logged and retried;
  the records are redelivered and handlers drop duplicates by event id;
- anything else propagates: a bug crashes loudly rather than skipping records. A poll that raises
  records nothing as polled, and a service that crashes calls :meth:`EventConsumer.abandon` before it
  stops, so no commit (not even the one before a revoke) moves past what the crash left unhandled.

A broker that does not answer at start is waited for with backoff (:meth:`EventConsumer.start`); one that goes
away later is retried by aiokafka itself (fetches, heartbeats, commits), and its logs are bounded by
:mod:`~streamgrpo.topics.broker_logs`.

Offsets are committed only by :meth:`EventConsumer.commit` (never automatically), after the pending
dead letters are acknowledged: at-least-once, nothing lost. A dead letter that cannot be delivered is
retried with backoff and then PAUSES the consumer (:func:`~streamgrpo.topics.dead_letter.deliver`):
no offset moves past it and the process does not exit into a restart loop. Every dead-lettered
record is committed past once its dead letter is delivered. ``dead_lettered_ids`` (a shared
:class:`~streamgrpo.topics.dedup.RecentIds`) lets several readers of one process dead-letter a bad
record once.

Group-less reading (followers, ``tail``, audits) is :mod:`streamgrpo.topics.follow`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    RebalanceInProgressError,
)

from streamgrpo import metrics
from streamgrpo.avro.codec import Codec
from streamgrpo.avro.records import DeadLetter
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.clients import aiokafka_config, logical_name, topic_name
from streamgrpo.topics.dead_letter import RETRIABLE, Backoff, deliver
from streamgrpo.topics.dead_letter import dead_letter as build_dead_letter
from streamgrpo.topics.dedup import RecentIds
from streamgrpo.topics.producer import EventProducer
from streamgrpo.topics.received import Received, received
from streamgrpo.topics.reconnect import StopSignal, start_when_reachable, stop_client

__all__ = ["EventConsumer", "Received"]
log = logging.getLogger(__name__)


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
        dead_lettered_ids: RecentIds | None = None,
        alive: Callable[[], object] | None = None,
        backoff: Backoff = Backoff(),
        stop: StopSignal | None = None,
        **aiokafka_overrides: Any,
    ) -> None:
        """``stop``: a start that waits for an unreachable broker gives up once it is set (see :meth:`start`)."""
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
        self.dead_lettered_ids = dead_lettered_ids if dead_lettered_ids is not None else RecentIds()
        self.alive = alive
        self.backoff = backoff
        self.stop_signal = stop
        self.started = False
        self._pending: dict[TopicPartition, int] = {}
        self._unacked: list[DeadLetter] = []
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
        self._kwargs = kwargs
        self._consumer = AIOKafkaConsumer(**kwargs)

    async def start(self) -> bool:
        """Join the group. A broker that does not answer is waited for with backoff (a service started before
        its broker does not exit into a restart loop; :mod:`~streamgrpo.topics.reconnect`); False when the
        ``stop`` signal was set while waiting (nothing started)."""
        if self._dlq is None:
            self._dlq = EventProducer(self.kafka, self.service, self.codec)
        self.started = await start_when_reachable(self._attempt_start, stop=self.stop_signal, alive=self.alive)
        return self.started

    async def _attempt_start(self) -> None:
        self._consumer.subscribe([topic_name(self.kafka, t) for t in self.topics], listener=_Listener(self))
        try:
            await self._consumer.start()
        except KafkaConnectionError:
            await stop_client(self._consumer)
            self._consumer = AIOKafkaConsumer(**self._kwargs)  # a failed start leaves a client that cannot restart
            raise

    async def stop(self) -> None:
        try:
            await stop_client(self._consumer)
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
        polled: dict[TopicPartition, int] = {}
        for tp, msgs in records.items():
            topic = logical_name(self.kafka, tp.topic)
            self._observe(tp, topic, msgs)
            for m in msgs:
                rec = received(self.codec, topic, m.partition, m.offset, m.key, m.value, m.timestamp)
                polled[tp] = m.offset + 1
                if rec.event is None:
                    self._reject(rec, rec.error_code or "decode_error", rec.error or "")
                    continue
                out.append(rec)
        self._pending.update(polled)  # only once the whole poll is in hand: a crash above commits none of it
        return out

    def abandon(self) -> None:
        """Forget what was polled and not committed (after a crash): no later commit, revoke or stop moves
        past it; the records go to the next owner of their partitions. Pending dead letters are kept."""
        self._pending.clear()

    def _observe(self, tp: TopicPartition, topic: str, msgs: list[Any]) -> None:
        """Events consumed and the partition's lag after this batch (high watermark of the fetch minus the
        next offset); the lag is refreshed only when records arrive."""
        m = metrics.current()
        m.inc(metrics.EVENTS_CONSUMED, len(msgs), topic=topic, group=self.group_id)
        highwater = self._consumer.highwater(tp) if msgs else None
        if highwater is not None:
            m.set(metrics.CONSUMER_LAG, max(0, highwater - msgs[-1].offset - 1), group=self.group_id, topic=topic,
                  partition=tp.partition)

    def _reject(self, rec: Received, code: str, reason: str) -> None:
        letter = build_dead_letter(service=self.service, consumer=self.group_id, topic=rec.topic,
                                   partition=rec.partition, offset=rec.offset, key=rec.key, value=rec.value,
                                   reason_code=code, reason=reason)
        if self.dead_lettered_ids.seen(letter.event_id):
            return  # another reader of this process dead-lettered the same record
        log.warning("dead-letter %s[%d]@%d: %s: %s", rec.topic, rec.partition, rec.offset, code, letter.reason)
        self._unacked.append(letter)
        self.dead_lettered += 1
        metrics.current().inc(metrics.DEAD_LETTERS, topic=rec.topic, reason=code)

    async def dead_letter(self, received: Received, reason_code: str, reason: str) -> None:
        """Reject a decoded record: it goes to dead-letters with the reason (acknowledged before the next commit)."""
        self._reject(received, reason_code, reason)

    async def _send_dead_letters(self) -> None:
        """One attempt: (re)send every unacknowledged dead letter and wait for the acknowledgements."""
        dlq, letters = self._dlq, list(self._unacked)
        assert dlq is not None, "consumer not started"
        for letter in letters:  # all of them again after a failure: same ids, dropped downstream
            dlq.send(letter)
        await asyncio.to_thread(dlq.flush)
        del self._unacked[:len(letters)]

    async def commit(self, held: Mapping[tuple[str, int], int] | None = None) -> None:
        """Commit everything polled so far, after pending dead letters are acknowledged (retried, then
        paused until they are: see :func:`~streamgrpo.topics.dead_letter.deliver`). ``held``: (catalog topic,
        partition) -> the first offset the caller polled but has not handled yet; the commit stops there and
        the rest of that partition is committed by a later call."""
        if self._unacked:
            await deliver(self._send_dead_letters, f"{len(self._unacked)} dead letter(s) of consumer "
                          f"{self.group_id}", backoff=self.backoff, alive=self.alive)
        await self._commit_offsets(held)

    async def _commit_offsets(self, held: Mapping[tuple[str, int], int] | None = None) -> None:
        if not self._pending:
            return
        stops = held or {}
        offsets: dict[TopicPartition, int] = {}
        later: dict[TopicPartition, int] = {}
        for tp, end in self._pending.items():
            stop = stops.get((logical_name(self.kafka, tp.topic), tp.partition))
            if stop is not None and stop < end:
                later[tp] = end
                end = stop
            offsets[tp] = end
        self._pending = later
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, RebalanceInProgressError) as exc:
            log.warning("commit failed during a rebalance (%s); records will be redelivered", exc)

    async def _commit_quietly(self) -> None:
        """Before partitions are revoked (rebalance, shutdown): one attempt, never a pause; on failure nothing is
        committed and the records go to the partitions' next owner."""
        try:
            if self._unacked:
                await self._send_dead_letters()
            await self._commit_offsets()
        except RETRIABLE as exc:
            log.warning("commit before revoke skipped (%s); the records will be redelivered", exc)

    def assignment(self) -> set[TopicPartition]:
        return set(self._consumer.assignment())
