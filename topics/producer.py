"""Typed event producer: ``send(event)`` puts an Avro event on its catalog topic under its key.

confluent-kafka with ``enable.idempotence`` (acks=all, ordered, no duplicates from retries) and a
delivery callback on every record. A record the broker does not acknowledge is never dropped
silently: :meth:`EventProducer.flush` raises :class:`ProduceError` listing every failure. An event
encoded larger than :data:`~streamgrpo.topics.limits.MAX_RECORD_BYTES` is refused before it is
queued, with its type and size (the project's producers bound what they write; this names the one
that did not, instead of an opaque ``MSG_SIZE_TOO_LARGE``).

What is not covered: transactions (the embedded Tansu broker does not isolate aborted ones;
exactly-once is a Faust setting for Apache Kafka, see streams/app.py).
"""

from __future__ import annotations

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
from streamgrpo.topics.errors import ProduceError, RecordTooLargeError
from streamgrpo.topics.limits import MAX_RECORD_BYTES

log = logging.getLogger(__name__)


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
        self._producer = Producer(cfg)
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self.delivered = 0

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            with self._lock:
                self._failures.append(f"{msg.topic()}[{msg.key()!r}]: {err.str()}")
            log.error("delivery failed to %s: %s", msg.topic(), err.str())
        else:
            self.delivered += 1

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
        while True:
            try:
                self._producer.produce(physical_topic, value=value, key=key, on_delivery=self._on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                self._producer.poll(0.1)
            except KafkaException as exc:
                raise ProduceError(f"cannot produce to {physical_topic}: {exc}") from exc
        self._producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every queued record is acknowledged; raise ProduceError on any failure."""
        remaining = self._producer.flush(timeout_s)
        with self._lock:
            failures, self._failures = self._failures, []
        if remaining:
            failures.append(f"{remaining} record(s) still unacknowledged after {timeout_s}s")
        if failures:
            raise ProduceError(
                f"{len(failures)} record(s) were not delivered (is the broker at {self.kafka.bootstrap} up?): "
                + "; ".join(failures[:5])
            )

    def close(self, timeout_s: float = 60.0) -> None:
        self.flush(timeout_s)

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the original error; still try to deliver what was queued
            self._producer.flush(5.0)
