"""The one follow-and-fold primitive on the real broker: a TRUE caught-up signal after a batched produce."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.clients import aiokafka_config
from streamgrpo.topics.errors import TopicsError
from streamgrpo.topics.follow import (
    FollowerThread,
    LogFollower,
    fold_events,
    iter_topic,
    log_bounds,
    read_topic,
)
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker
N = 250


def _task(i: int) -> R.Task:
    return R.Task(envelope=R.Envelope.new("tests", task_id=f"task-{i}"), question=f"q{i}", source="builtin",
                  group_size=2)


def _batched_produce(kafka: KafkaSettings, n: int = N, start: int = 0) -> None:
    with EventProducer(kafka, "tests", **{"linger.ms": 50}) as producer:  # many records per batch
        for i in range(start, start + n):
            producer.send(_task(i))


async def _watermarks(kafka: KafkaSettings) -> int:
    consumer = AIOKafkaConsumer(**aiokafka_config(kafka), group_id=None)
    await consumer.start()
    try:
        name = f"{kafka.topic_prefix}tasks"
        tps = [TopicPartition(name, p) for p in consumer.partitions_for_topic(name) or []]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


class Count:
    def __init__(self) -> None:
        self.ids: set[str] = set()

    def apply(self, event: R.Event) -> None:
        self.ids.add(event.envelope.task_id or "")


def test_caught_up_means_every_record_of_a_batched_produce_was_folded(kafka_ns: KafkaSettings) -> None:
    _batched_produce(kafka_ns)
    watermarks = asyncio.run(_watermarks(kafka_ns))
    if not os.environ.get("STREAMGRPO_TEST_BOOTSTRAP"):
        # the stale case is really exercised: the embedded broker's watermarks lag the log end
        assert watermarks < N, f"watermarks {watermarks} == log end: no stale watermark to test against"

    async def follow() -> tuple[int, int]:
        fold = Count()
        # small polls split the last batch across polls: a watermark-based reader says "caught up" early
        follower = LogFollower(kafka_ns, ["tasks"], fold_events(fold.apply), max_records=7)
        stop = asyncio.Event()
        task = asyncio.create_task(follower.run(stop))
        await asyncio.wait_for(follower.caught_up.wait(), 30)
        seen = len(fold.ids)
        stop.set()
        await task
        return seen, sum(follower.ends.values())

    seen, ends = asyncio.run(follow())
    assert seen == N and ends == N


def test_a_follower_keeps_folding_after_it_caught_up(kafka_ns: KafkaSettings) -> None:
    _batched_produce(kafka_ns, 10)

    async def follow() -> int:
        fold = Count()
        follower = LogFollower(kafka_ns, ["tasks"], fold_events(fold.apply))
        stop = asyncio.Event()
        task = asyncio.create_task(follower.run(stop))
        await asyncio.wait_for(follower.caught_up.wait(), 30)
        await asyncio.to_thread(_batched_produce, kafka_ns, 15, 10)
        for _ in range(100):
            if len(fold.ids) == 25:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await task
        return len(fold.ids)

    assert asyncio.run(follow()) == 25


def test_a_follower_thread_folds_until_closed_and_check_stays_quiet(kafka_ns: KafkaSettings) -> None:
    _batched_produce(kafka_ns, 10)
    fold = Count()
    follower = FollowerThread(kafka_ns, ["tasks"], fold_events(fold.apply), name="test-follower")
    follower.check()  # not started yet: nothing to report
    follower.start()
    try:
        assert follower.caught_up(30), "the history was folded"
        assert len(fold.ids) == 10
        _batched_produce(kafka_ns, 5, 10)
        deadline = time.monotonic() + 30
        while len(fold.ids) < 15 and time.monotonic() < deadline:
            follower.check()
            time.sleep(0.1)
        assert len(fold.ids) == 15, "records produced after the catch-up are folded too"
    finally:
        follower.close()
    assert not follower._thread.is_alive(), "close() stops the thread"
    follower.check()  # closed on purpose: not an error


def test_a_follower_thread_that_stops_by_itself_is_named_by_check(kafka: KafkaSettings,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    ns = kafka.model_copy(update={"topic_prefix": "no-such-prefix."})
    follower = FollowerThread(ns, ["tasks"], fold_events(Count().apply), name="test-follower")
    with caplog.at_level(logging.WARNING, logger="streamgrpo.topics.follow"):
        follower.start()
        follower._thread.join(30)
    assert not follower._thread.is_alive(), "a missing topic ends the follower"
    with pytest.raises(TopicsError, match=r"test-follower: following \['tasks'\] stopped: .*does not exist"):
        follower.check()
    assert any("test-follower: following" in r.getMessage() for r in caplog.records), "logged where it happened"
    assert not follower.caught_up(0)


def test_readers_stop_at_the_true_end_and_count_it(kafka_ns: KafkaSettings) -> None:
    _batched_produce(kafka_ns)
    assert len(read_topic(kafka_ns, "tasks")) == N
    assert [r.offset for r in iter_topic(kafka_ns, "tasks", limit=3)] == sorted(r.offset for r in
                                                                                 iter_topic(kafka_ns, "tasks", limit=3))
    assert len(list(iter_topic(kafka_ns, "tasks", limit=5))) == 5
    bounds = log_bounds(kafka_ns, [f"{kafka_ns.topic_prefix}tasks"])
    assert sum(end - start for start, end in bounds.values()) == N
    assert read_topic(kafka_ns, "groups") == []


def test_an_undecodable_record_reaches_the_reader_with_its_reason(kafka_ns: KafkaSettings) -> None:
    with EventProducer(kafka_ns, "tests") as producer:
        producer.send(_task(1), key="k")
        producer.send_raw(f"{kafka_ns.topic_prefix}tasks", b"\x00garbage", "k")
    got = read_topic(kafka_ns, "tasks")
    assert [r.event is None for r in got] == [False, True]
    assert got[1].error_code == "decode_error" and got[1].value == b"\x00garbage"


def test_a_missing_topic_is_a_clear_error(kafka: KafkaSettings) -> None:
    ns = kafka.model_copy(update={"topic_prefix": "no-such-prefix."})
    with pytest.raises(TopicsError, match="does not exist; run `streamgrpo topics ensure`"):
        read_topic(ns, "tasks")


def test_partition_ranges_read_exactly_those_offsets(kafka_ns: KafkaSettings) -> None:
    _batched_produce(kafka_ns, 60)
    everything = read_topic(kafka_ns, "tasks")
    counts: dict[int, int] = {}
    for r in everything:
        counts[r.partition] = counts.get(r.partition, 0) + 1
    busy = max(counts, key=lambda p: counts[p])
    assert counts[busy] >= 6, counts
    got = [(r.partition, r.offset) for r in iter_topic(kafka_ns, "tasks", partitions={busy: (2, 5)})]
    assert got == [(busy, 2), (busy, 3), (busy, 4)]  # only that partition, only [2, 5)
    assert len(list(iter_topic(kafka_ns, "tasks", partitions={busy: (-10, 10 ** 6)}))) == counts[busy]
