"""The typed seams between services and the plumbing: what a service's loop needs of Kafka, nothing more.

- :class:`EventSink`: where events go (``send`` queues, ``flush`` waits for every acknowledgement);
  :class:`~streamgrpo.topics.producer.EventProducer` is one.
- :class:`EventSource`: where a service's records come from, with the consumer-group duties:
  ``poll``, ``dead_letter`` a decoded record it rejects, ``commit`` what it polled;
  :class:`~streamgrpo.topics.consumer.EventConsumer` is one.

Services type their parameters with these Protocols (not ``Any``/``object``), so a test can hand them
a fake and mypy checks the real thing. What is not covered: the Faust agents' seams (their context is
:class:`streamgrpo.streams.app.StreamsContext`).
"""

from __future__ import annotations

from typing import Protocol

from aiokafka import TopicPartition

from streamgrpo.avro.records import Event
from streamgrpo.topics.received import Received


class EventSink(Protocol):
    def send(self, event: Event) -> None: ...

    def flush(self) -> None: ...


class EventSource(Protocol):
    async def poll(self, max_records: int = 100, timeout_ms: int = 500) -> list[Received]: ...

    async def dead_letter(self, received: Received, reason_code: str, reason: str) -> None: ...

    async def commit(self) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...
