"""A broker death and restart in the middle of a live loop, as a durable broker (Apache Kafka) would live it,
played on the embedded Tansu broker, which has memory storage only.

:func:`restart_durably` freezes every process of the loop (SIGSTOP), takes a :class:`Snapshot` of the broker
(every topic with its partition count, every record with key, value, headers and timestamp, every consumer
group's committed offsets), SIGKILLs the broker, lets the loop run ``outage_s`` seconds without it (the
services meet a dead broker, as in a real outage), freezes it again, starts a new broker on the same port with
the snapshot given back (each record at its old offset, checked; the committed offsets committed again) and
lets the loop go on. What the services did not get acknowledged before the death (a record in a producer's
queue) stays theirs to send again: nothing the snapshot holds was written after the first freeze.

What a durable broker keeps that this one does not: idempotent producers' ids and sequence numbers, group
generations and members (every member rejoins, as after a broker failover). The chaos campaign
(:mod:`support.chaos`) calls it between its kills; nothing in the product imports this module.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from streamgrpo.topics.broker import EmbeddedBroker


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@dataclass
class Snapshot:
    """What a durable broker would still hold: topics (name -> partitions), records, committed offsets."""

    topics: dict[str, int] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    offsets: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)  # group -> (topic, part, offset)

    @property
    def committed(self) -> int:
        return sum(len(v) for v in self.offsets.values())


def snapshot(bootstrap: str, timeout_s: float = 30.0) -> Snapshot:
    """Everything the broker at ``bootstrap`` holds (internal ``__`` topics aside); the loop must be frozen."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=timeout_s)
    out = Snapshot(topics={name: len(t.partitions) for name, t in meta.topics.items()
                           if not name.startswith("__")})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "broker-restart-snapshot",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        out.records = _read_all(consumer, out.topics, timeout_s)
    finally:
        consumer.close()
    groups = admin.list_consumer_groups().result(timeout_s)
    for g in sorted(x.group_id for x in groups.valid):
        if g == "broker-restart-snapshot":
            continue
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g].result(timeout_s)
        committed = [(tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions if tp.offset >= 0]
        if committed:
            out.offsets[g] = committed
    return out


def _read_all(consumer: Consumer, topics: dict[str, int], timeout_s: float) -> list[Record]:
    """Every record of every partition of ``topics``, each to its end (its partition-EOF event: Tansu's
    ListOffsets answers a high watermark of 1 for a partition that holds 10 records in one batch, its Fetch the
    right one); one assignment for all, so a snapshot takes about a second, not one poll per partition."""
    left = {(t, p) for t, n in topics.items() for p in range(n)}
    if not left:
        return []
    consumer.assign([TopicPartition(t, p, 0) for t, p in sorted(left)])
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                left.discard((msg.topic(), msg.partition()))
                continue
            raise AssertionError(f"{msg.topic()}[{msg.partition()}]: {msg.error()}")
        records.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                              tuple(msg.headers() or ()), msg.timestamp()[1]))
    if left:
        raise AssertionError(f"no end of partition within {timeout_s} s for {sorted(left)[:5]}")
    return sorted(records, key=lambda r: (r.topic, r.partition, r.offset))


def give_back(bootstrap: str, snap: Snapshot, timeout_s: float = 60.0) -> None:
    """Create the topics, produce the records in order (each must land at its old offset: an empty topic and
    offsets that were contiguous from 0) and commit the groups' offsets again."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in snap.topics.items()])
    for future in futures.values():
        future.result(timeout_s)
    produce_in_place(Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}),
                     snap.records, timeout_s)
    for group, committed in snap.offsets.items():
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(t, p, o) for t, p, o in committed], asynchronous=False)
        finally:
            consumer.close()


def produce_in_place(producer: Producer, records: Iterable[Record], timeout_s: float = 60.0) -> None:
    """Produce ``records`` in order (``topic``: the physical name); into empty topics each must land at its old
    offset: an AssertionError names those that did not, or that were not delivered."""
    moved: list[str] = []

    def delivered(rec: Record):  # type: ignore[no-untyped-def]
        def callback(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None or msg.offset() != rec.offset:
                moved.append(f"{rec.topic}[{rec.partition}]@{rec.offset}: {err or msg.offset()}")
        return callback

    for rec in records:
        producer.produce(rec.topic, value=rec.value, key=rec.key, partition=rec.partition, headers=list(rec.headers),
                         timestamp=rec.timestamp_ms, on_delivery=delivered(rec))
        producer.poll(0)
    left = producer.flush(timeout_s)
    if left or moved:
        raise AssertionError(f"{left} records not given back; moved: {moved[:10]}")


def loop_pids(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc), parents first."""
    from support.chaos import children

    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo += children(pid)
    return out


def freeze(root: int) -> list[int]:
    """SIGSTOP ``root`` and every descendant (the root first, so it starts no new child; twice over, for a child
    started meanwhile); the stopped pids."""
    stopped: list[int] = []
    for _ in range(2):
        for pid in loop_pids(root):
            if pid not in stopped:
                try:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass
    return stopped


def thaw(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def restart_durably(broker: EmbeddedBroker, root: int, outage_s: float = 10.0) -> dict[str, float | int]:
    """Kill ``broker`` under the live loop of process ``root`` and bring it back with everything a durable broker
    keeps (see the module docstring); the figures of the restart."""
    started = time.monotonic()
    stopped = freeze(root)
    try:
        snap = snapshot(broker.bootstrap)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGKILL)
        broker.proc.wait(10)
        broker.proc = None
    finally:
        thaw(stopped)
    outage_from = time.time()
    time.sleep(outage_s)  # the subject: the services without their broker
    outage_to = time.time()
    stopped = freeze(root)
    try:
        broker.start()
        give_back(broker.bootstrap, snap)
    except KafkaException as exc:
        raise AssertionError(f"the broker could not be given back its log: {exc}") from exc
    finally:
        thaw(stopped)
    return {"topics": len(snap.topics), "records": len(snap.records), "committed_offsets": snap.committed,
            "groups": len(snap.offsets), "outage_s": outage_s, "took_s": round(time.monotonic() - started, 1),
            "outage_from": outage_from, "outage_to": outage_to}
