"""What ``streamgrpo status`` reads from the topics: group-less reads of the catalog topics (:class:`Reader`,
true partition ends included) and the folds over them: consumer lag per group, adapter versions and the status of
each (one fold of ``adapter-events``, never the trailing ``adapter-registry``), the versions served per worker
(``rollouts``), groups in flight (``rollout-requests`` against ``groups``), dead letters of the last hour, and the
loop's stale share and A/B control arm (the run report's fold over ``adapter-events`` and ``groups``). The
endpoints, the report and the screen are :mod:`streamgrpo.cli.status`'s.

The whole-topic folds (:class:`WholeRun`) read each record once per ``status --watch``: every refresh reads only
what arrived since the last. Not covered: a consistent snapshot (each figure is read on its own); a read stops
after 15 s (a whole-topic read then resumes at the next refresh and the screen says which topics are partial;
a windowed read is partial). Records that do not decode or are another event type are skipped.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streamgrpo.config import KafkaSettings
from streamgrpo.topics import catalog

ADAPTER_TOPIC, SAMPLES_TOPIC, DLQ_TOPIC = catalog.ADAPTER_EVENTS, catalog.TRAINING_SAMPLES, catalog.DEAD_LETTERS
#: The consumer group of the reads: never commits, and is left out of the lags (k8s/kafka_acl.py STATUS_GROUP).
GROUP = "streamgrpo-status"

@dataclass
class Lag:
    group: str
    topic: str
    partition: int
    committed: int
    end: int
    lag: int



@dataclass
class DeadLetters:
    """Dead letters of the last hour: how many, the count per reason code (most common first) and the last
    one per consumer."""

    count: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)

class Reader:
    """Group-less reads of the catalog topics (confluent-kafka), true ends included."""

    def __init__(self, kafka: KafkaSettings, read_s: float = 15.0) -> None:
        from confluent_kafka import Consumer

        from streamgrpo.topics.clients import client_config

        self.kafka = kafka
        self.consumer = Consumer(client_config(kafka, **{"group.id": GROUP, "enable.auto.commit": False}))
        self.read_s = read_s
        self._ends: dict[str, dict[int, int]] = {}
        self._next: dict[tuple[str, int], int] = {}  # (topic, partition) -> next offset of the reads by `new`
        self.partial: set[str] = set()  # topics whose last `new` read stopped before the end

    def physical(self, topic: str) -> str:
        return f"{self.kafka.topic_prefix}{topic}"

    def partitions(self, topic: str) -> list[int]:
        md = self.consumer.list_topics(self.physical(topic), timeout=10).topics.get(self.physical(topic))
        return [] if md is None or md.error is not None else sorted(md.partitions)

    def ends(self, topic: str) -> dict[int, int]:
        """True end offset per partition (the embedded broker's high watermark can lag; see topics.follow)."""
        from streamgrpo.topics.follow import log_bounds

        if topic not in self._ends:
            bounds = log_bounds(self.kafka, [self.physical(topic)])
            self._ends[topic] = {p: end for (_, p), (_, end) in sorted(bounds.items())}
        return self._ends[topic]

    def refresh(self) -> None:
        """Forget the partition ends read so far: the next figure reads them again (``status --watch``)."""
        self._ends.clear()

    def since(self, topic: str, kind: type | tuple[type, ...], since_ms: int | None = None,
              last: int | None = None) -> list[Any]:
        """Decoded events of type ``kind`` on ``topic`` from ``since_ms`` (or the ``last`` records per partition)
        to its end; records that do not decode or are another type are skipped (the dead-letter path's business,
        not the status screen's)."""
        from confluent_kafka import TopicPartition

        ends = self.ends(topic)
        starts = {p: 0 for p in ends}
        if since_ms is not None and ends:
            found = self.consumer.offsets_for_times(
                [TopicPartition(self.physical(topic), p, since_ms) for p in ends], timeout=10)
            starts = {tp.partition: (tp.offset if tp.offset >= 0 else ends[tp.partition]) for tp in found}
        if last is not None:
            starts = {p: max(0, ends[p] - last) for p in ends}
        return self._read(topic, kind, starts)[0]

    def new(self, topic: str, kind: type | tuple[type, ...]) -> list[Any]:
        """Decoded events of type ``kind`` on ``topic`` that this reader has not read by ``new`` before: the
        whole topic the first time, then what arrived since (a ``--watch`` refresh reads only that). A read
        cut short by its 15 s resumes where it stopped at the next call, and ``topic`` is in :attr:`partial`
        until one reaches the end."""
        ends = self.ends(topic)
        events, reached = self._read(topic, kind, {p: self._next.get((topic, p), 0) for p in ends})
        self._next.update({(topic, p): offset for p, offset in reached.items()})
        if any(reached[p] < end for p, end in ends.items()):
            self.partial.add(topic)
        else:
            self.partial.discard(topic)
        return events

    def _read(self, topic: str, kind: type | tuple[type, ...], starts: dict[int, int],
              ) -> tuple[list[Any], dict[int, int]]:
        """The events of type ``kind`` from ``starts`` to the ends, and the next offset of each partition (its
        start where nothing was read): at most 15 s, then what was read."""
        from confluent_kafka import TopicPartition

        from streamgrpo.avro.codec import Codec
        from streamgrpo.avro.errors import DecodeError

        ends = self.ends(topic)
        reached = {p: min(starts.get(p, 0), end) for p, end in ends.items()}
        todo = {p for p in ends if reached[p] < ends[p]}
        if not todo:
            return [], reached
        codec, out = Codec(self.kafka.schema_registry_url), []
        self.consumer.assign([TopicPartition(self.physical(topic), p, reached[p]) for p in todo])
        deadline = time.monotonic() + self.read_s
        while todo and time.monotonic() < deadline:
            msg = self.consumer.poll(0.5)
            if msg is None:
                self._past_markers(topic, todo, reached, ends)
                continue
            if msg.error():
                continue
            partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            if partition not in todo or offset < reached[partition]:
                continue
            try:
                event = codec.decode(msg.value() or b"")
            except DecodeError:
                event = None
            if isinstance(event, kind):
                out.append(event)
            reached[partition] = offset + 1
            if offset + 1 >= ends[partition]:
                todo.discard(partition)
        self.consumer.unassign()
        return out, reached

    def _past_markers(self, topic: str, todo: set[int], reached: dict[int, int], ends: dict[int, int]) -> None:
        """Partitions of ``todo`` whose position is at their end although no record ends there: the last offset
        of a partition written in transactions (Faust's ``exactly_once``) is a commit marker, never delivered."""
        from confluent_kafka import TopicPartition

        for tp in self.consumer.position([TopicPartition(self.physical(topic), p) for p in sorted(todo)]):
            if tp.offset >= ends[tp.partition]:
                reached[tp.partition] = ends[tp.partition]
                todo.discard(tp.partition)

    def close(self) -> None:
        self.consumer.close()


def consumer_lags(reader: Reader) -> list[Lag]:
    """Committed offset vs partition end for every group that committed on a catalog topic."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    from streamgrpo.topics.catalog import CATALOG
    from streamgrpo.topics.clients import client_config, logical_name

    admin = AdminClient(client_config(reader.kafka))
    groups = sorted(g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid)
    out = []
    for group in groups:
        if group == GROUP:
            continue
        fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)[group]
        for tp in fut.result().topic_partitions or []:
            topic = logical_name(reader.kafka, tp.topic)
            if tp.offset < 0 or topic not in CATALOG or not tp.topic.startswith(reader.kafka.topic_prefix):
                continue
            end = reader.ends(topic).get(tp.partition, 0)
            out.append(Lag(group, topic, tp.partition, tp.offset, end, max(0, end - tp.offset)))
    return out


def served_from_topics(reader: Reader, last: int = 200) -> dict[str, int]:
    """Newest adapter version in each worker instance's recent RolloutCompleted records."""
    from streamgrpo.avro import records as R

    return newest_served(reader.since(catalog.ROLLOUTS, R.RolloutCompleted, last=last))


def newest_served(completed: Iterable[Any]) -> dict[str, int]:
    """Newest adapter version in each worker instance's ``RolloutCompleted`` events."""
    newest: dict[str, tuple[float, int]] = {}
    for ev in completed:
        who = f"{ev.envelope.producer.service}/{ev.envelope.producer.instance}"
        seen = (ev.envelope.event_time.timestamp(), int(ev.adapter_version))  # same millisecond: the higher version
        newest[who] = max(newest.get(who, seen), seen)
    return {who: v for who, (_, v) in sorted(newest.items())}


#: The figures of :meth:`~streamgrpo.cli.progress.Progress.loop_closure` that ``status`` shows.
LOOP_KEYS = ("samples_trained", "samples_dropped_stale", "stale_share", "control_arm_groups", "control_arm_rollouts")


class WholeRun:
    """The figures that fold whole topics: adapter versions published / primary / canary and the status of every
    announced version (``adapter-events``), and the loop's stale share and A/B control arm (every
    ``AdapterPublished`` and ``GroupClosed``). One fold, the run report's
    (:class:`~streamgrpo.cli.progress.Progress`, whose registry fold is :mod:`streamgrpo.lifecycle.registry`'s),
    never a second computation: the versions line and the registry line of the screen are two views of it (the
    statuses the streams worker writes to ``adapter-registry`` trail that fold, and a broker killed between an
    ``AdapterPublished`` and its ``AdapterState`` left "published v49 primary v49" above "v48 PRIMARY"). Fed by
    :meth:`Reader.new`, so each ``status --watch`` refresh reads only the records that arrived since the last one."""

    TOPICS = (ADAPTER_TOPIC, catalog.GROUPS)
    #: What the liveness rule (:mod:`streamgrpo.lifecycle.liveness`) reads besides :data:`TOPICS` (a live run only).
    LIVENESS_TOPICS = (catalog.TASKS, catalog.ROLLOUT_REQUESTS, catalog.ROLLOUTS, DLQ_TOPIC)

    def __init__(self, canary_share: float, adapter_name: str = "planner", liveness_s: float | None = None) -> None:
        from streamgrpo.cli.progress import Progress
        from streamgrpo.lifecycle.liveness import DEFAULT_BOUND_S, Liveness

        self.progress = Progress(canary_share=canary_share,
                                 liveness=Liveness(DEFAULT_BOUND_S if liveness_s is None else liveness_s))
        self.adapter_name = adapter_name

    def update(self, reader: Reader) -> None:
        """Fold what arrived on the topics since the last update (the liveness topics too: a live run)."""
        from streamgrpo.avro import records as R

        for topic in self.TOPICS + self.LIVENESS_TOPICS:
            self.fold(topic, reader.new(topic, R.Event))

    def fold(self, topic: str, events: Iterable[Any]) -> None:
        """Fold ``topic``'s events (from the broker, or a finished run's archive); other types are skipped."""
        from streamgrpo.avro import records as R

        for ev in events:
            if topic == ADAPTER_TOPIC or topic == catalog.GROUPS and isinstance(ev, R.GroupClosed):
                self.progress.apply(ev)  # the folds ignore the lifecycle types they do not use
            elif topic in self.LIVENESS_TOPICS:
                self.progress.liveness.apply(ev)

    def stalls(self, partial: Iterable[str], now: float) -> list[str] | None:
        """The liveness rule's stalls at ``now``; None when a topic it reads was not read to the end (``partial``):
        old records alone would look like a stall."""
        if set(partial) & {*self.TOPICS, *self.LIVENESS_TOPICS}:
            return None
        return self.progress.stalls(now)

    @property
    def registry(self) -> dict[int, str]:
        """The lifecycle status of every announced version, from the same fold as :meth:`versions`."""
        from streamgrpo.lifecycle.registry import status

        line = self.progress.registry.line(self.adapter_name)
        return {v: status(line, v).value for v in sorted(line.announced)}

    def versions(self) -> dict[str, int | None]:
        line = self.progress.registry.line(self.adapter_name)
        return {"published": line.latest, "primary": line.primary, "canary": line.canary}

    def loop(self) -> dict[str, float]:
        closure = self.progress.loop_closure()
        return {key: closure[key] for key in LOOP_KEYS}


def groups_in_flight(reader: Reader, window_s: float) -> int:
    from streamgrpo.avro import records as R

    since = int((time.time() - window_s) * 1000)
    requested = {ev.envelope.group_id for ev in reader.since(catalog.ROLLOUT_REQUESTS, R.RolloutRequest, since)}
    closed = {ev.envelope.group_id for ev in reader.since(catalog.GROUPS, R.GroupClosed, since)}
    return len(requested - closed)


def dead_letters(reader: Reader) -> DeadLetters:
    from streamgrpo.avro import records as R

    since = int((time.time() - 3600) * 1000)
    return dead_letter_summary(reader.since(DLQ_TOPIC, R.DeadLetter, since))


def dead_letter_summary(events: Iterable[Any]) -> DeadLetters:
    """How many ``DeadLetter`` events, the count per reason code (most common first), the last per consumer."""
    letters = list(events)
    out = DeadLetters(len(letters), dict(Counter(ev.reason_code for ev in letters).most_common()))
    for ev in letters:
        out.last[ev.consumer] = f"{ev.reason_code}: {ev.reason[:160]}"
    return out
