"""A judge outlives its broker: bounded logs while the broker is gone, and it resumes when the broker returns
(issue 24, "broker loss as a first-class fault"; ``streamgrpo run``'s own embedded broker:
``e2e/test_run_broker_death.py``).

The real ``streamgrpo judge`` runs as a subprocess against an embedded Tansu broker on a fixed port, as in k8s
where the broker is external and restarts. It scores one rollout; the broker is SIGKILLed; for
:data:`OUTAGE_S` the judge must stay alive and write at most :data:`MAX_OUTAGE_LINES` log lines (before the
bounded logs, aiokafka's reconnect errors alone came at 90-250 lines/s per service). A new broker is started on
the same port; its memory storage lost everything, so the test ensures the topics again and gives it the old log
back while the judge is SIGSTOPped (what a durable broker would have kept, or a restore from the run's archive),
then one more task and rollout. The judge must say the broker is reachable again, score the new rollout, and not score the old one a
second time. A second test starts the judge before its broker: it waits, and serves once the broker is up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.broker import EmbeddedBroker, free_port
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker

OUTAGE_S = 15.0
INTERVAL_S = 5  # [kafka] outage_log_interval_s of the judge: the first line, then about one per 5 s
MAX_OUTAGE_LINES = 8


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


class Judge:
    """``streamgrpo judge`` in a subprocess with its own config file and log (stopped by pid)."""

    def __init__(self, tmp: Path, kafka: KafkaSettings) -> None:
        config = tmp / "judge.toml"
        config.write_text(f'[kafka]\nbootstrap = "{kafka.bootstrap}"\ntopic_prefix = "{kafka.topic_prefix}"\n'
                          f'session_timeout_ms = 3000\noutage_log_interval_s = {INTERVAL_S}\n\n'
                          '[judge]\nmetrics_port = 0\npoll_timeout_ms = 500\ntask_wait_s = 120\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
        env.update(STREAMGRPO_CONFIG=str(config), STREAMGRPO_HOME=str(tmp / "home"))
        self.log = tmp / "judge.log"
        with open(self.log, "ab") as sink:
            self.proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "--log-level", "INFO", "judge"],
                                         env=env, stdout=sink, stderr=subprocess.STDOUT)

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def wait_logged(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines()):
                return
            assert self.proc.poll() is None, "judge exited:\n" + "\n".join(self.lines()[-40:])
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not logged within {timeout_s} s:\n" + "\n".join(self.lines()[-40:]))

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                return None
        return self.proc.returncode


def kill_hard(broker: EmbeddedBroker) -> None:
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGKILL)
    broker.proc.wait(10)
    broker.proc = None


def restored(judge: Judge, broker: EmbeddedBroker, kafka: KafkaSettings, log: list[R.Task | R.RolloutCompleted]) -> None:
    """Start ``broker`` with the topics and ``log`` in them while the judge is SIGSTOPped: the judge meets the broker
    as a durable one would come back (a memory broker would first be seen without its topics: not this test's
    subject)."""
    judge.proc.send_signal(signal.SIGSTOP)
    try:
        broker.start()
        ensure(kafka)
        if log:
            send(kafka, log)
    finally:
        judge.proc.send_signal(signal.SIGCONT)


@pytest.mark.fault
def test_a_judge_outlives_its_broker_with_bounded_logs_and_resumes_without_loss_or_repeat(tmp_path: Path) -> None:
    port = free_port()
    first = EmbeddedBroker(tmp_path / "broker1", port=port)
    first.start()
    second = EmbeddedBroker(tmp_path / "broker2", port=port)
    kafka = KafkaSettings(bootstrap=first.bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", session_timeout_ms=3000)
    judge = None
    try:
        ensure(kafka)
        judge = Judge(tmp_path, kafka)
        judge.wait_logged(" assigned [(", 120)
        old = task_and_rollout("a")
        send(kafka, old)
        assert [r.envelope.rollout_id for r in rewards_for(kafka, "r-a", 60)] == ["r-a"], judge.lines()[-40:]

        mark = len(judge.lines())
        kill_hard(first)
        time.sleep(OUTAGE_S)
        outage = judge.lines()[mark:]
        assert judge.proc.poll() is None, "judge exited with the broker:\n" + "\n".join(outage[-40:])
        assert len(outage) <= MAX_OUTAGE_LINES, f"{len(outage)} lines in {OUTAGE_S:g} s:\n" + "\n".join(outage[:60])
        assert sum(f"Kafka broker {kafka.bootstrap} unreachable: " in line for line in outage) == 1, outage
        assert any("unreachable since" in line for line in outage), outage

        restored(judge, second, kafka, old)
        send(kafka, task_and_rollout("b"))
        rewards_for(kafka, "r-b", 120)
        time.sleep(5.0)  # a second Reward for r-a would come with or soon after r-b's
        rewards = [r.event for r in read_topic(kafka, "rewards", timeout_s=5) if isinstance(r.event, R.Reward)]
        lines = judge.lines()
        assert [(r.envelope.rollout_id, r.status) for r in rewards] == [("r-b", R.RewardStatus.OK)], lines[-40:]
        assert any(f"Kafka broker {kafka.bootstrap} reachable again" in line for line in lines[mark:]), lines[mark:]
        rc = judge.stop()
        assert rc == 0, (rc, judge.lines()[-40:])
    finally:
        if judge is not None and judge.proc.poll() is None:
            judge.proc.kill()
            judge.proc.wait(10)
        first.stop()
        second.stop()


def test_a_judge_started_before_its_broker_serves_once_the_broker_is_up(tmp_path: Path) -> None:
    port = free_port()
    broker = EmbeddedBroker(tmp_path / "broker", port=port)
    kafka = KafkaSettings(bootstrap=broker.bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", session_timeout_ms=3000)
    judge = Judge(tmp_path, kafka)
    try:
        judge.wait_logged(f"Kafka broker {kafka.bootstrap} unreachable: ", 60)
        time.sleep(3.0)
        assert judge.proc.poll() is None, judge.lines()
        restored(judge, broker, kafka, [])
        judge.wait_logged(" assigned [(", 120)
        send(kafka, task_and_rollout("c"))
        rewards = rewards_for(kafka, "r-c", 60)
        assert [(r.envelope.rollout_id, r.status) for r in rewards] == [("r-c", R.RewardStatus.OK)], judge.lines()[-40:]
        judge.wait_logged(f"Kafka broker {kafka.bootstrap} reachable again", 30)
        rc = judge.stop()
        assert rc == 0, (rc, judge.lines()[-40:])
    finally:
        if judge.proc.poll() is None:
            judge.proc.kill()
            judge.proc.wait(10)
        broker.stop()
