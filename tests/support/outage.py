"""Helpers of the broker-outage tests (``tests/integration/test_broker_outage.py``): a service subprocess, the
broker SIGKILLed, the outage's log lines checked, and a new broker on the same port given the old log back.

- :class:`Service`: ``streamgrpo <argv>`` in a subprocess with its own config file, home and log (stopped by pid);
- :func:`partition` / :func:`next_on_partition`: where a key lands (work after the outage on the partition the
  service wrote before it);
- :func:`kill_hard`: SIGKILL an :class:`~streamgrpo.topics.broker.EmbeddedBroker` (its memory storage is gone);
- :func:`assert_bounded_outage`: the service lived through the outage and logged it in a bounded number of lines;
- :func:`old_log` / :func:`restored`: every record of the catalog topics, and a new broker started with the topics
  and those records (same partitions, same order, so the same offsets in an empty topic) while the service is
  SIGSTOPped: the broker comes back as a durable one would (a memory broker would first be seen without its
  topics: not these tests' subject). Committed consumer offsets are NOT given back (Tansu has memory storage only).

What is not covered: anything the product depends on; nothing in a service imports this module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.broker import EmbeddedBroker
from streamgrpo.topics.catalog import TOPICS
from streamgrpo.topics.clients import client_config, topic_name
from streamgrpo.topics.follow import iter_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.topics.received import Received

#: How long the broker stays away.
OUTAGE_S = 15.0
#: ``[kafka] outage_log_interval_s`` of the services: the first line, then about one per 5 s.
INTERVAL_S = 5
#: Lines a service may write in the :data:`OUTAGE_S` after the SIGKILL (before the bounded logs, aiokafka's
#: reconnect errors alone came at 90-250 lines/s per service).
MAX_OUTAGE_LINES = 8


def partition(key: str, partitions: int = 3) -> int:
    """The partition the services' producers (librdkafka ``murmur2_random``, the Java client's murmur2) give
    ``key``: a test puts the work after the outage on the partition the service wrote before it, where a producer
    whose state the new broker does not know is refused (its sequence numbers continue the old broker's)."""
    from aiokafka.partitioner import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def next_on_partition(key: str, candidates: Sequence[str]) -> str:
    """The first of ``candidates`` on ``key``'s :func:`partition`."""
    return next(c for c in candidates if partition(c) == partition(key))


def kafka_toml(kafka: KafkaSettings) -> str:
    """The ``[kafka]`` section of a service under test (a short session; the outage interval above)."""
    return (f'[kafka]\nbootstrap = "{kafka.bootstrap}"\ntopic_prefix = "{kafka.topic_prefix}"\n'
            f'session_timeout_ms = {kafka.session_timeout_ms}\noutage_log_interval_s = {INTERVAL_S}\n\n')


class Service:
    """``streamgrpo <argv>`` in a subprocess with its own config file, home and log (stopped by pid)."""

    def __init__(self, tmp: Path, name: str, config: str, argv: Sequence[str], log_level: str = "INFO") -> None:
        path = tmp / f"{name}.toml"
        path.write_text(config)
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
        env.update(STREAMGRPO_CONFIG=str(path), STREAMGRPO_HOME=str(tmp / "home"), PYTHONUNBUFFERED="1")
        self.name = name
        self.log = tmp / f"{name}.log"
        with open(self.log, "ab") as sink:
            self.proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "--log-level", log_level, *argv],
                                         env=env, stdout=sink, stderr=subprocess.STDOUT)

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.lines()[-n:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_logged(self, text: str, timeout_s: float, count: int = 1) -> None:
        """Until ``text`` is in ``count`` lines of the log; fails at once if the service exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if sum(text in line for line in self.lines()) >= count:
                return
            assert self.alive(), f"{self.name} exited:\n{self.tail()}"
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not logged within {timeout_s} s:\n{self.tail()}")

    def stop(self) -> int | None:
        """SIGTERM and wait: the exit code, None when it had to be killed after 30 s."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)


def kill_hard(broker: EmbeddedBroker) -> None:
    """SIGKILL the broker (no clean shutdown: its clients see connections refused)."""
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGKILL)
    broker.proc.wait(10)
    broker.proc = None


def assert_bounded_outage(service: Service, kafka: KafkaSettings, outage: list[str]) -> None:
    """``service`` is alive and logged the outage (``outage``: its lines since the SIGKILL) in at most
    :data:`MAX_OUTAGE_LINES` lines: one "unreachable:" line naming the broker, then summaries."""
    assert service.alive(), f"{service.name} exited with the broker:\n" + "\n".join(outage[-40:])
    assert len(outage) <= MAX_OUTAGE_LINES, f"{len(outage)} lines in {OUTAGE_S:g} s:\n" + "\n".join(outage[:60])
    assert sum(f"Kafka broker {kafka.bootstrap} unreachable: " in line for line in outage) == 1, outage
    assert any("unreachable since" in line for line in outage), outage


def outage(service: Service, broker: EmbeddedBroker, kafka: KafkaSettings) -> list[str]:
    """SIGKILL ``broker``, wait :data:`OUTAGE_S`, check :func:`assert_bounded_outage`; the service's lines since."""
    mark = len(service.lines())
    kill_hard(broker)
    time.sleep(OUTAGE_S)  # the subject is what a service does over time without a broker: nothing to wait for
    lines = service.lines()[mark:]
    assert_bounded_outage(service, kafka, lines)
    return lines


def old_log(kafka: KafkaSettings) -> list[Received]:
    """Every record of every catalog topic under ``kafka``'s prefix, per partition in offset order."""
    return [r for t in TOPICS for r in iter_topic(kafka, t.name)]


def give_back(kafka: KafkaSettings, records: Sequence[Received]) -> None:
    """Produce ``records`` as they were (bytes, key, partition, timestamp), in order: into empty topics each
    lands at its old offset (checked)."""
    from confluent_kafka import Producer

    from support.broker_restart import Record, produce_in_place

    produce_in_place(Producer(client_config(kafka, **{"enable.idempotence": True, "acks": "all"})),
                     (Record(topic_name(kafka, r.topic), r.partition, r.offset, r.key, r.value, (), r.timestamp_ms)
                      for r in records))


def restored(service: Service, broker: EmbeddedBroker, kafka: KafkaSettings, *,
             events: Sequence[R.Event] = (), records: Sequence[Received] = ()) -> None:
    """Start ``broker`` with the topics, ``records`` (:func:`give_back`) and ``events`` in them while ``service`` is
    SIGSTOPped: the service meets the broker as a durable one would come back."""
    service.proc.send_signal(signal.SIGSTOP)
    try:
        broker.start()
        ensure(kafka)
        if records:
            give_back(kafka, records)
        if events:
            with EventProducer(kafka, "test") as producer:
                for event in events:
                    producer.send(event)
    finally:
        service.proc.send_signal(signal.SIGCONT)


def resumed_then_stopped(service: Service, kafka: KafkaSettings, mark: int) -> None:
    """Since log line ``mark`` the service said its broker is reachable again, and SIGTERM stops it with exit 0.

    The line comes from the reachability probe, which asks the broker every 5 s: a service can resume its work
    (and the caller see it) up to one probe period before the line is written, so it is waited for (30 s)."""
    text = f"Kafka broker {kafka.bootstrap} reachable again"
    deadline = time.monotonic() + 30
    while not any(text in line for line in service.lines()[mark:]):
        assert time.monotonic() < deadline, service.lines()[mark:]
        assert service.alive(), f"{service.name} exited:\n{service.tail()}"
        time.sleep(0.2)
    rc = service.stop()
    assert rc == 0, (rc, service.tail())


def tear_down(service: Service | None, *brokers: EmbeddedBroker) -> None:
    """Kill the service (if it still runs) and stop the brokers."""
    if service is not None:
        service.kill()
    for broker in brokers:
        broker.stop()
