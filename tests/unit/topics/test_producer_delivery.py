"""Records the broker never acknowledged are reported, and a caller cannot mistake a second flush for delivery
(topics/producer.py ``DeliveryFailedError``; rollout/worker.py ``_flush``). A real librdkafka producer against an
address where nothing listens: its records time out (``message.timeout.ms``) and librdkafka drops them, so the next
flush "succeeds" with nothing queued. The rollout worker retried the flush after a failure and then committed the
offsets of rollouts whose events were lost (found by the broker-outage tests' author); it now raises at once."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from streamgrpo.config import KafkaSettings
from streamgrpo.rollout.worker import RolloutWorker
from streamgrpo.topics.broker import free_port
from streamgrpo.topics.errors import DeliveryFailedError, ProduceError
from streamgrpo.topics.producer import EventProducer


def _dead_end_producer() -> EventProducer:
    kafka = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", topic_prefix="t.")
    return EventProducer(kafka, "test", **{"message.timeout.ms": 500})


def test_a_record_the_broker_never_took_is_a_delivery_failure_and_the_next_flush_is_empty() -> None:
    producer = _dead_end_producer()
    producer.send_raw("t.tasks", b"payload", "k")
    with pytest.raises(DeliveryFailedError, match=r"1 record\(s\) were not delivered"):
        producer.flush(10)
    producer.flush(1)  # librdkafka dropped the record: nothing left to deliver, nothing raised
    assert producer.delivered == 0


def test_the_rollout_worker_does_not_retry_a_flush_whose_records_were_dropped() -> None:
    producer = _dead_end_producer()
    producer.send_raw("t.rollouts", b"a rollout's event", "k")
    started = time.monotonic()
    with pytest.raises(DeliveryFailedError, match="offsets not committed"):
        asyncio.run(RolloutWorker._flush(SimpleNamespace(producer=producer)))  # type: ignore[arg-type]
    assert time.monotonic() - started < 10, "raised at once, not after retries that would deliver nothing"
    assert issubclass(DeliveryFailedError, ProduceError)
