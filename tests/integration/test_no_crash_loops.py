"""No crash loops, on the real broker: what used to stop a consumer at every restart is dead-lettered (bounded)
and committed past, and a consumer that cannot deliver a dead letter pauses instead of exiting.

Each test reproduces one defect: a >= 1 MB bad record on the judge's and on the streams' inputs (its full
copy in a dead letter could not be produced), a Task with group_size = 10^9 (the fan-out built requests
until memory ran out), a valid but oversized Task (its requests could not be produced), and a dead letter
that cannot be delivered (the consumer exited and met the record again on restart).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from pathlib import Path

import pytest
from support.streams import WorkerProcess

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.service import JudgeService
from streamgrpo.topics.consumer import EventConsumer
from streamgrpo.topics.dead_letter import Backoff
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.limits import DEAD_LETTER_VALUE_BYTES, MAX_TASK_BYTES
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker
BIG = bytes(range(256)) * (1_200_000 // 256)  # ~1.2 MB of bytes that are not an event


def big_producer(kafka: KafkaSettings) -> EventProducer:
    """A producer allowed to write records above 1 MB (what a careless or hostile upstream could do)."""
    return EventProducer(kafka, "upstream", **{"message.max.bytes": 4_000_000})


def letters(kafka: KafkaSettings) -> list[R.DeadLetter]:
    return [r.event for r in read_topic(kafka, "dead-letters") if isinstance(r.event, R.DeadLetter)]


def assert_bounded_copy_of_big(letter: R.DeadLetter) -> None:
    assert letter.truncated and letter.original_size == len(BIG)
    assert letter.original_sha256 == hashlib.sha256(BIG).hexdigest()
    assert letter.value == BIG[:DEAD_LETTER_VALUE_BYTES] and letter.reason_code == "decode_error"


def run_judge(kafka: KafkaSettings) -> JudgeService:
    service = JudgeService(kafka, JudgeSettings(consumer_group="judge-big", poll_timeout_ms=100, task_wait_s=2))
    asyncio.run(asyncio.wait_for(service.run(max_idle_s=3.0), timeout=120))
    service.close()
    return service


def test_a_megabyte_bad_record_on_the_judges_input_is_dead_lettered_once_and_passed(kafka_ns: KafkaSettings) -> None:
    task = R.Task(R.Envelope.new("test", task_id="t1"), "2+2?", "math", 2, ["4"])
    rollout = R.RolloutCompleted(R.Envelope.new("test", task_id="t1", group_id="g1", rollout_id="r1"), "2+2?",
                                 "math", "4", 1, R.RolloutStatus.ANSWERED, 2, "planner", 0, 5)
    with big_producer(kafka_ns) as producer:
        producer.send(task)
        producer.send_raw(f"{kafka_ns.topic_prefix}rollouts", BIG, "g1")
        producer.send_raw(f"{kafka_ns.topic_prefix}tasks", BIG, "t-big")  # the judge only reads tasks: no letter
        producer.send(rollout)
    first = run_judge(kafka_ns)
    assert first.stats.rollouts == 1 and first.stats.rewards_ok == 1
    (letter,) = letters(kafka_ns)
    assert letter.source_topic == "rollouts" and letter.consumer == "judge-big"
    assert letter.event_id == ids.dead_letter_id("rollouts", letter.source_partition, letter.source_offset)
    assert_bounded_copy_of_big(letter)
    rewards = [r.event for r in read_topic(kafka_ns, "rewards")]
    assert [r.envelope.rollout_id for r in rewards] == ["r1"]
    # a restart does not meet the record again: its offset was committed with the rest
    second = run_judge(kafka_ns)
    assert second.stats.rollouts == 0 and len(letters(kafka_ns)) == 1


def wait_for(kafka: KafkaSettings, topic: str, n: int, timeout_s: float = 90) -> list:
    deadline = time.monotonic() + timeout_s
    got = read_topic(kafka, topic)
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.5)
        got = read_topic(kafka, topic)
    return got


def test_bad_huge_and_oversized_records_on_the_streams_inputs(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    huge_group = R.Task(R.Envelope.new("test", task_id="huge"), "q", "test", 10**9)
    oversized = R.Task(R.Envelope.new("test", task_id="long"), "x" * (MAX_TASK_BYTES + 1000), "test", 2)
    good = R.Task(R.Envelope.new("test", task_id="good"), "2+2?", "test", 2)
    with big_producer(kafka_ns) as producer:
        producer.send_raw(f"{kafka_ns.topic_prefix}tasks", BIG, "bad")
        producer.send_raw(f"{kafka_ns.topic_prefix}rewards", BIG, "g")  # read by the window AND metrics agents
        producer.send(huge_group)
        producer.send(oversized)
        producer.send(good)
    worker = WorkerProcess(kafka_ns, "fanout,window,metrics", tmp_path / "data")
    try:
        requests = wait_for(kafka_ns, "rollout-requests", 2)
        dead = wait_for(kafka_ns, "dead-letters", 4)
        time.sleep(3)  # time for a duplicate letter to show up, if any
        dead = [r.event for r in read_topic(kafka_ns, "dead-letters")]
        assert worker.alive(), worker.log_text()[-3000:]
    finally:
        worker.stop()
    assert {r.event.envelope.task_id for r in requests} == {"good"} and len(requests) == 2
    by_code: dict[str, list[R.DeadLetter]] = {}
    for d in dead:
        by_code.setdefault(d.reason_code, []).append(d)
    assert sorted((c, len(v)) for c, v in by_code.items()) == [
        ("decode_error", 2), ("invalid_task", 1), ("task_too_large", 1)], [(d.source_topic, d.reason_code) for d in dead]
    assert sorted(d.source_topic for d in by_code["decode_error"]) == ["rewards", "tasks"]  # the rewards record once
    for d in by_code["decode_error"]:
        assert_bounded_copy_of_big(d)
    assert "group_size <= 1024" in by_code["invalid_task"][0].reason
    assert "bytes encoded" in by_code["task_too_large"][0].reason
    # a restarted worker resumes past every one of them: no new letter, no new request
    again = WorkerProcess(kafka_ns, "fanout,window,metrics", tmp_path / "data2")
    try:
        time.sleep(8)
        assert again.alive(), again.log_text()[-3000:]
    finally:
        again.stop()
    assert len(read_topic(kafka_ns, "dead-letters")) == len(dead)
    assert len(read_topic(kafka_ns, "rollout-requests")) == 2


def test_a_consumer_that_cannot_deliver_its_dead_letter_pauses_and_commits_nothing(
        kafka_ns: KafkaSettings, caplog: pytest.LogCaptureFixture) -> None:
    with big_producer(kafka_ns) as producer:
        producer.send_raw(f"{kafka_ns.topic_prefix}tasks", BIG, "bad")
    tiny_dlq = EventProducer(kafka_ns, "tests", **{"message.max.bytes": 2000})  # no dead letter fits

    async def consume(dlq: EventProducer | None, pause_s: float) -> bool:
        async with EventConsumer(kafka_ns, "paused", ["tasks"], "tests", dlq=dlq,
                                 backoff=Backoff(0.05, 0.2, 3)) as consumer:
            while not consumer.dead_lettered:
                await consumer.poll(10, 200)
            commit = asyncio.create_task(consumer.commit())
            await asyncio.wait({commit}, timeout=pause_s)
            done = commit.done()
            commit.cancel()
            await asyncio.gather(commit, return_exceptions=True)
            return done

    with caplog.at_level(logging.WARNING, logger="streamgrpo.topics.dead_letter"):
        assert not asyncio.run(consume(tiny_dlq, pause_s=3))  # neither delivered nor crashed: paused
    assert any("PAUSED" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    assert letters(kafka_ns) == []
    # nothing was committed past the record: the group's next consumer meets it again, and delivers its letter
    assert asyncio.run(consume(None, pause_s=30))
    (letter,) = letters(kafka_ns)
    assert_bounded_copy_of_big(letter)
