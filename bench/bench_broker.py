"""Broker benchmark on the embedded Tansu: produce and consume events/s for each client we use.

- produce: EventProducer (confluent-kafka, idempotent, acks=all), Task events (~100 B) and
  PlannerAction events (~2.6 kB);
- consume, group: EventConsumer (aiokafka) incl. decode, and a plain confluent-kafka group
  consumer (librdkafka) incl. decode; the time until the first record arrives is reported
  separately (group join);
- consume, group-less: read_topic (confluent-kafka assign()), incl. decode.
Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench_codec import planner_action
from confluent_kafka import Consumer

from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.broker import EmbeddedBroker
from streamgrpo.topics.consumer import EventConsumer
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer


def _produce(kafka: KafkaSettings, events: list[R.Event]) -> float:
    t = time.perf_counter()
    with EventProducer(kafka, "bench") as p:
        for e in events:
            p.send(e)
    return len(events) / (time.perf_counter() - t)


async def _aiokafka(kafka: KafkaSettings, topic: str, n: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    got, first = 0, None
    async with EventConsumer(kafka, f"bench-{uuid.uuid4().hex[:6]}", [topic], "bench") as c:
        while got < n:
            batch = await c.poll(2000, 500)
            if batch and first is None:
                first = time.perf_counter()
            got += len(batch)
        end = time.perf_counter()
    assert first is not None
    return first - t0, (n - 0) / (end - first)


def _librdkafka(kafka: KafkaSettings, physical: str, n: int) -> tuple[float, float]:
    codec = Codec()
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    t0 = time.perf_counter()
    c.subscribe([physical])
    got, first = 0, None
    while got < n:
        for m in c.consume(2000, timeout=0.5):
            if m.error():
                continue
            if first is None:
                first = time.perf_counter()
            codec.decode(m.value())
            got += 1
    end = time.perf_counter()
    c.close()
    assert first is not None
    return first - t0, n / (end - first)


def main(n: int = 20000) -> dict[str, object]:
    with EmbeddedBroker(Path(tempfile.mkdtemp())) as broker:
        kafka = KafkaSettings(bootstrap=broker.bootstrap, topic_prefix="bench.")
        ensure(kafka)
        tasks = [R.Task(envelope=R.Envelope.new("bench", task_id=str(i)), question=f"What is {i} * 7?",
                        source="builtin", group_size=8) for i in range(n)]
        actions = [planner_action(i) for i in range(n // 4)]
        out: dict[str, object] = {"bench": "broker", "broker": "tansu (embedded, memory)", "n_tasks": n,
                                  "n_planner_actions": len(actions)}
        out["produce_tasks_per_s"] = _produce(kafka, tasks)
        out["produce_planner_actions_per_s"] = _produce(kafka, actions)
        t = time.perf_counter()
        assert len(read_topic(kafka, "tasks")) == n
        out["read_topic_tasks_per_s"] = n / (time.perf_counter() - t)
        join, rate = asyncio.run(_aiokafka(kafka, "tasks", n))
        out["aiokafka_group_first_record_s"], out["aiokafka_group_tasks_per_s"] = join, rate
        join, rate = _librdkafka(kafka, "bench.tasks", n)
        out["librdkafka_group_first_record_s"], out["librdkafka_group_tasks_per_s"] = join, rate
        join, rate = asyncio.run(_aiokafka(kafka, "planner-actions", len(actions)))
        out["aiokafka_group_planner_actions_per_s"] = rate
        return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)))
