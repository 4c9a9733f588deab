"""A judge outlives its broker: bounded logs while the broker is gone, and it resumes when the broker returns
(issue 24, "broker loss as a first-class fault"; ``streamgrpo run``'s own embedded broker:
``e2e/test_run_broker_death.py``).

The real ``streamgrpo judge`` runs as a subprocess against an embedded Tansu broker on a fixed port, as in k8s
where the broker is external and restarts. It scores one rollout; the broker is SIGKILLed; for
:data:`~support.outage.OUTAGE_S` the judge must stay alive and write at most
:data:`~support.outage.MAX_OUTAGE_LINES` log lines (before the bounded logs, aiokafka's reconnect errors alone came
at 90-250 lines/s per service). A new broker is started on
the same port; its memory storage lost everything, so the test ensures the topics again and gives it the old log
back while the judge is SIGSTOPped (what a durable broker would have kept, or a restore from the run's archive),
then one more task and rollout, whose Reward goes to the partition of the first one's (where the judge's producer's
sequence numbers are the old broker's). The judge must say the broker is reachable again, score the new rollout, and not score the old one a
second time. A second test starts the judge before its broker: it waits, and serves once the broker is up.
The rollout worker and the trainer: ``test_rollout_broker_outage.py``, ``test_trainer_broker_outage.py`` (the
helpers are shared: ``support/outage.py``).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from support.outage import (
    Service,
    kafka_toml,
    next_on_partition,
    outage,
    restored,
    resumed_then_stopped,
    tear_down,
)

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.broker import EmbeddedBroker, free_port
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def task_and_rollout(name: str) -> list[R.Task | R.RolloutCompleted]:
    task = R.Task(R.Envelope.new("test", task_id=name), question="What is 2+2?", source="test", group_size=1,
                  ground_truths=["4"])
    env = R.Envelope.new("rollout", task_id=name, group_id=f"g-{name}", rollout_id=f"r-{name}")
    rollout = R.RolloutCompleted(envelope=env, question="What is 2+2?", source="test", final_answer="4", turns=1,
                                 status=R.RolloutStatus.ANSWERED, group_size=1, adapter_name="planner",
                                 adapter_version=0, duration_ms=1)
    return [task, rollout]


def send(kafka: KafkaSettings, events: list[R.Task | R.RolloutCompleted]) -> None:
    with EventProducer(kafka, "test") as producer:
        for event in events:
            producer.send(event)


def rewards_for(kafka: KafkaSettings, rollout_id: str, timeout_s: float) -> list[R.Reward]:
    deadline, rewards = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        rewards = [r.event for r in read_topic(kafka, "rewards", timeout_s=5) if isinstance(r.event, R.Reward)]
        if any(r.envelope.rollout_id == rollout_id for r in rewards):
            break
        time.sleep(0.5)
    return rewards


def judge(tmp: Path, kafka: KafkaSettings) -> Service:
    """``streamgrpo judge`` in a subprocess (:class:`~support.outage.Service`)."""
    return Service(tmp, "judge", kafka_toml(kafka) + '[judge]\nmetrics_port = 0\npoll_timeout_ms = 500\n'
                   'task_wait_s = 120\n', ["judge"])


@pytest.mark.fault
def test_a_judge_outlives_its_broker_with_bounded_logs_and_resumes_without_loss_or_repeat(tmp_path: Path) -> None:
    port = free_port()
    first = EmbeddedBroker(tmp_path / "broker1", port=port)
    first.start()
    second = EmbeddedBroker(tmp_path / "broker2", port=port)
    kafka = KafkaSettings(bootstrap=first.bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", session_timeout_ms=3000)
    service = None
    try:
        ensure(kafka)
        service = judge(tmp_path, kafka)
        service.wait_logged(" assigned [(", 120)
        old = task_and_rollout("a")
        send(kafka, old)
        assert [r.envelope.rollout_id for r in rewards_for(kafka, "r-a", 60)] == ["r-a"], service.tail()

        mark = len(service.lines())
        outage(service, first, kafka)

        restored(service, second, kafka, events=old)
        b = next_on_partition("g-a", [f"g-b{i}" for i in range(100)]).removeprefix("g-")  # r-a's Reward's partition
        send(kafka, task_and_rollout(b))
        rewards_for(kafka, f"r-{b}", 120)
        time.sleep(5.0)  # a second Reward for r-a would come with or soon after r-b's
        rewards = [r.event for r in read_topic(kafka, "rewards", timeout_s=5) if isinstance(r.event, R.Reward)]
        lines = service.lines()
        assert [(r.envelope.rollout_id, r.status) for r in rewards] == [(f"r-{b}", R.RewardStatus.OK)], lines[-40:]
        resumed_then_stopped(service, kafka, mark)
    finally:
        tear_down(service, first, second)


def test_a_judge_started_before_its_broker_serves_once_the_broker_is_up(tmp_path: Path) -> None:
    port = free_port()
    broker = EmbeddedBroker(tmp_path / "broker", port=port)
    kafka = KafkaSettings(bootstrap=broker.bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", session_timeout_ms=3000)
    service = judge(tmp_path, kafka)
    try:
        service.wait_logged(f"Kafka broker {kafka.bootstrap} unreachable: ", 60)
        time.sleep(3.0)
        assert service.alive(), service.lines()
        restored(service, broker, kafka)
        service.wait_logged(" assigned [(", 120)
        send(kafka, task_and_rollout("c"))
        rewards = rewards_for(kafka, "r-c", 60)
        assert [(r.envelope.rollout_id, r.status) for r in rewards] == [("r-c", R.RewardStatus.OK)], service.tail()
        service.wait_logged(f"Kafka broker {kafka.bootstrap} reachable again", 30)
        rc = service.stop()
        assert rc == 0, (rc, service.tail())
    finally:
        service.kill()
        broker.stop()
