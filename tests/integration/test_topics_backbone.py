"""The backbone against the real embedded broker: topics, producer, consumer, dead letters."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from fixtures.sample_events import sample_events

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics import admin
from streamgrpo.topics.catalog import TOPICS
from streamgrpo.topics.consumer import EventConsumer
from streamgrpo.topics.errors import ProduceError
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def _task(i: int) -> R.Task:
    return R.Task(envelope=R.Envelope.new("tests", task_id=f"task-{i}"), question=f"q{i}", source="builtin",
                  group_size=2)


def test_ensure_is_idempotent(kafka_ns: KafkaSettings) -> None:
    report = admin.ensure(kafka_ns)
    assert report.created == [] and report.drift == {}
    assert sorted(report.ok) == sorted(kafka_ns.topic_prefix + t.name for t in TOPICS)


def test_ensure_reports_partition_drift(kafka: KafkaSettings) -> None:
    ns = kafka.model_copy(update={"topic_prefix": "drift-test."})
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    futures = client.create_topics([NewTopic("drift-test.tasks", num_partitions=1, replication_factor=1)])
    futures["drift-test.tasks"].result(timeout=10)
    report = admin.ensure(ns)
    assert "drift-test.tasks" in report.drift
    assert "partitions: broker has 1, catalog wants 3" in report.drift["drift-test.tasks"][0]


def test_every_event_type_lands_on_its_topic_and_reads_back(kafka_ns: KafkaSettings) -> None:
    with EventProducer(kafka_ns, "tests") as producer:
        for event in sample_events():
            producer.send(event)
    seen = {}
    for spec in TOPICS:
        for r in read_topic(kafka_ns, spec.name):
            assert r.error is None
            seen[r.event.SCHEMA_NAME] = (r.event, spec, r.key)
    for event in sample_events():
        got, spec, key = seen[event.SCHEMA_NAME]
        assert got == event
        assert key.decode() == spec.key_of(event)


def test_read_topic_sees_every_record_of_a_batched_produce(kafka_ns: KafkaSettings) -> None:
    """Regression: Tansu reports a stale high watermark after multi-record batches."""
    with EventProducer(kafka_ns, "tests", **{"linger.ms": 50}) as producer:
        for i in range(250):
            producer.send(_task(i))
    records = read_topic(kafka_ns, "tasks")
    assert sorted(r.event.envelope.task_id for r in records) == sorted(f"task-{i}" for i in range(250))
    counts = {i.name: i.messages for i in admin.describe_topics(kafka_ns)}
    assert counts[kafka_ns.topic_prefix + "tasks"] == 250


def test_garbage_goes_to_dead_letters_and_good_records_after_it_are_consumed(kafka_ns: KafkaSettings) -> None:
    physical = kafka_ns.topic_prefix + "tasks"
    with EventProducer(kafka_ns, "tests") as producer:
        producer.send(_task(1), key="same")
        producer.send_raw(physical, b"\x00not avro at all", "same")
        producer.send(sample_events()[3], topic="tasks", key="same")  # a ToolObservation on the tasks topic
        for i in range(2, 6):
            producer.send(_task(i), key="same")

    async def consume() -> tuple[list[str], int]:
        got: list[str] = []
        async with EventConsumer(kafka_ns, "g-dlq", ["tasks"], "tests") as consumer:
            for _ in range(60):
                batch = await consumer.poll(100, 500)
                got += [r.event.envelope.task_id for r in batch]
                await consumer.commit()
                if len(got) >= 5:
                    break
            return got, consumer.dead_lettered

    got, dead = asyncio.run(consume())
    assert got == [f"task-{i}" for i in (1, 2, 3, 4, 5)]
    assert dead == 2
    letters = [r.event for r in read_topic(kafka_ns, "dead-letters")]
    by_code = {d.reason_code: d for d in letters}
    assert set(by_code) == {"decode_error", "wrong_event_type"}
    garbage = by_code["decode_error"]
    assert garbage.source_topic == "tasks" and garbage.source_offset == 1
    assert garbage.value == b"\x00not avro at all" and garbage.key == b"same"
    assert "not a streamgrpo event" in garbage.reason
    assert "ToolObservation does not belong on topic tasks" in by_code["wrong_event_type"].reason


def test_committed_offsets_resume_without_redelivery(kafka_ns: KafkaSettings) -> None:
    with EventProducer(kafka_ns, "tests") as producer:
        for i in range(6):
            producer.send(_task(i), key="k")

    async def take(n: int) -> list[str]:
        out: list[str] = []
        async with EventConsumer(kafka_ns, "g-resume", ["tasks"], "tests", max_poll_records=1) as c:
            while len(out) < n:
                out += [r.event.envelope.task_id for r in await c.poll(1, 500)]
            await c.commit()
        return out

    first = asyncio.run(take(3))
    rest = asyncio.run(take(3))
    assert first + rest == [f"task-{i}" for i in range(6)]


def test_undeliverable_records_raise_instead_of_vanishing() -> None:
    dead = KafkaSettings(bootstrap="127.0.0.1:9")  # nothing listens on the discard port
    producer = EventProducer(dead, "tests", **{"message.timeout.ms": 1500})
    producer.send(_task(1))
    with pytest.raises(ProduceError, match="not delivered"):
        producer.flush(timeout_s=10)
