"""Typed event producer: ``send(event)`` puts an Avro event on its catalog topic under its key.

confluent-kafka with ``enable.idempotence`` (acks=all, ordered, no duplicates from retries) and a
delivery callback on every record. A record the broker does not acknowledge is never dropped
silently: :meth:`EventProducer.flush` raises :class:`ProduceError` listing every failure. An event
encoded larger than :data:`~streamgrpo.topics.limits.MAX_RECORD_BYTES` is refused before it is
queued, with its type and size (the project's producers bound what they write; this names the one
that did not, instead of an opaque ``MSG_SIZE_TOO_LARGE``).

A broker that lost this producer's state (restarted without it: a memory broker, a restore from the archive
into a new one) refuses the next record on a partition the producer wrote before: its producer id and sequence
numbers continue the old broker's (``OUT_OF_ORDER_SEQUENCE_NUMBER``, ``UNKNOWN_PRODUCER_ID``, or a fatal
"sequence desynchronization" that makes the librdkafka producer unusable). So the librdkafka producer is replaced
by a new one (a new producer id, sequences from 0): at the next send after librdkafka reported every broker down to
it, when nothing is in flight, and in :meth:`EventProducer.flush` when records were refused that way, which the new
producer sends again in the order they were queued (the records not yet acknowledged are kept for this; the
services' event ids are deterministic, so a copy the broker did keep is dropped downstream). Before, the next
flush raised :class:`ProduceError` (the trainer exited after storing a version it had not announced) or hung until
``message.timeout.ms``. Not covered: a producer that never saw the outage against a broker that loops on "unknown
producer id" without saying so (its records time out after ``message.timeout.ms`` and flush raises, as before).

What is not covered: transactions (the embedded Tansu broker does not isolate aborted ones;
exactly-once is a Faust setting for Apache Kafka, see streams/app.py).
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from streamgrpo import metrics
from streamgrpo.avro.codec import Codec
from streamgrpo.avro.records import Event
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.catalog import spec, topic_for
from streamgrpo.topics.clients import client_config, topic_name
from streamgrpo.topics.errors import DeliveryFailedError, ProduceError, RecordTooLargeError
from streamgrpo.topics.limits import MAX_RECORD_BYTES

log = logging.getLogger(__name__)

#: Delivery errors that mean the broker does not know this producer's id or sequence numbers any more, or that
#: librdkafka made the producer unusable (``_FATAL``: a fatal idempotence error such as "sequence desynchronization").
STATE_LOST = frozenset({KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, KafkaError.UNKNOWN_PRODUCER_ID, KafkaError._FATAL})


def check_size(event: Event, value: bytes) -> None:
    """Raise :class:`RecordTooLargeError` when ``value`` (``event`` encoded) exceeds the project's record bound."""
    if len(value) > MAX_RECORD_BYTES:
        raise RecordTooLargeError(f"{type(event).__name__} {event.event_id} is {len(value)} bytes encoded; records "
                                  f"are bounded to {MAX_RECORD_BYTES} bytes")


class EventProducer:
    """Produces events; thread-safe. Use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        kafka: KafkaSettings,
        service: str,
        codec: Codec | None = None,
        **overrides: Any,
    ) -> None:
        self.kafka = kafka
        self.service = service
        self.codec = codec or Codec(kafka.schema_registry_url)
        cfg = client_config(
            kafka,
            **{
                "client.id": f"{kafka.client_id}-{service}",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                # murmur2: the partitioner of the Java client, aiokafka and Faust, so records keyed by
                # group_id land on the same partition whichever client produced them (co-partitioning).
                "partitioner": "murmur2_random",
                "message.timeout.ms": 60_000,
            },
        )
        cfg.update(overrides)
        cfg["error_cb"] = self._on_error
        self._config = cfg
        self._producer = Producer(cfg)
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self._renewing = threading.RLock()  # one replacement at a time (sends come from several threads)
        # records queued and not yet acknowledged, in the order they were queued: a new producer sends them again
        # when the broker lost this one's state (what librdkafka holds anyway; removed at each acknowledgement)
        self._inflight: dict[int, tuple[str, bytes, str | bytes | None]] = {}
        self._ids = itertools.count()
        self._state_lost = False
        self._unreachable = False  # librdkafka said every broker was down since this producer was made
        self.delivered = 0

    def _on_error(self, err: KafkaError) -> None:
        """librdkafka's error events (served by poll/flush): an outage makes the next send renew the producer."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN or err.fatal():
            with self._lock:
                self._unreachable = True

    def _on_delivery(self, rid: int, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if err is not None and err.code() in STATE_LOST:
                self._state_lost = self._state_lost or rid in self._inflight  # kept: sent again by flush()
                return
            record = self._inflight.pop(rid, None)
            if record is None:  # a report of a producer replaced since: its record was sent again
                return
            if err is None:
                self.delivered += 1
                return
            self._failures.append(f"{msg.topic()}[{msg.key()!r}]: {err.str()}")
        log.error("delivery failed to %s: %s", msg.topic(), err.str())

    def send(self, event: Event, *, topic: str | None = None, key: str | None = None) -> None:
        """Queue ``event`` on ``topic`` (default: its catalog topic) under ``key`` (default: catalog key)."""
        t = spec(topic) if topic else topic_for(event)
        physical = topic_name(self.kafka, t.name)
        value = self.codec.encode(event, physical)
        check_size(event, value)
        self.send_raw(physical, value, key if key is not None else t.key_of(event))
        metrics.current().inc(metrics.EVENTS_PRODUCED, topic=t.name)

    def send_raw(self, physical_topic: str, value: bytes, key: str | bytes | None) -> None:
        """Queue already-encoded bytes as they are (benchmarks and tests; no size bound)."""
        with self._renewing:
            self._producer.poll(0)  # serve error events: an outage seen while this producer was idle
            with self._lock:
                renew = self._unreachable and not self._inflight
            if renew:
                self._renew(None)
        rid = next(self._ids)
        with self._lock:
            self._inflight[rid] = (physical_topic, value, key)
        try:
            self._produce(rid, physical_topic, value, key)
        except ProduceError:
            with self._lock:
                self._inflight.pop(rid, None)
            raise

    def _produce(self, rid: int, physical_topic: str, value: bytes, key: str | bytes | None) -> None:
        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._on_delivery(rid, err, msg)

        while True:
            try:
                self._producer.produce(physical_topic, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                self._producer.poll(0.1)
            except KafkaException as exc:
                raise ProduceError(f"cannot produce to {physical_topic}: {exc}") from exc
        self._producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every queued record is acknowledged; raise ProduceError on any failure. When the broker lost
        this producer's state, a new producer sends what was not acknowledged again first (module docstring)."""
        remaining, fatal = self._flush(timeout_s)
        if fatal is not None or self._state_lost:
            self._renew(fatal)
            remaining, fatal = self._flush(timeout_s)
        with self._lock:
            failures, self._failures = self._failures, []
            if fatal is not None or self._state_lost:
                failures.append(f"the broker refused this producer again after a new one: {fatal or 'state lost'}")
        still = f"{remaining} record(s) still unacknowledged after {timeout_s}s" if remaining else ""
        if failures:  # dropped by librdkafka: another flush would not deliver them
            raise DeliveryFailedError(
                f"{len(failures)} record(s) were not delivered (is the broker at {self.kafka.bootstrap} up?): "
                + "; ".join(failures[:5]) + (f"; {still}" if still else ""))
        if remaining:  # still queued: a later flush may deliver them
            raise ProduceError(f"{still} (is the broker at {self.kafka.bootstrap} up?)")

    def _flush(self, timeout_s: float) -> tuple[int, str | None]:
        """librdkafka's flush -> (records still queued, the fatal error it raised or None). A fatal error (an
        idempotence error such as "sequence desynchronization with broker") surfaces as an exception from a
        callback (confluent-kafka raises it out of the report being served)."""
        try:
            return int(self._producer.flush(timeout_s)), None
        except (KafkaException, SystemError) as exc:
            return 0, str(exc.__cause__ or exc)

    def _renew(self, fatal: str | None) -> None:
        """A new librdkafka producer (a new producer id, sequence numbers from 0) sends every record not
        acknowledged again, in the order they were queued."""
        with self._lock:
            pending = sorted(self._inflight.items())
            self._inflight.clear()
            state_lost, self._state_lost, self._unreachable = self._state_lost, False, False
        if fatal is not None or state_lost:
            log.warning("the broker at %s does not know this producer's state any more (restarted without it?%s): "
                        "a new producer sends the %d record(s) not acknowledged again", self.kafka.bootstrap,
                        f" {fatal}" if fatal else "", len(pending))
        else:
            log.info("a new producer after the broker at %s was unreachable (the broker may not know the old one's "
                     "sequence numbers)", self.kafka.bootstrap)
        old, self._producer = self._producer, Producer(self._config)
        try:
            old.purge()
        except (KafkaException, SystemError, RuntimeError):  # a fatal producer may refuse even that
            pass
        for _, (topic, value, key) in pending:
            self.send_raw(topic, value, key)

    def close(self, timeout_s: float = 60.0) -> None:
        self.flush(timeout_s)

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the original error; still try to deliver what was queued
            self._producer.flush(5.0)
