"""The broker-outage log filter (:mod:`streamgrpo.topics.broker_logs`): what the client libraries log while the
broker is unreachable reaches the log as a few lines.

In process: real log records of the shapes aiokafka, librdkafka and Faust write, through a real handler with the
CLI's :class:`~streamgrpo.log.RedactingFilter`, on a simulated clock. In a fresh interpreter: the real aiokafka and
confluent-kafka clients, configured by :mod:`~streamgrpo.topics.clients`, against a closed loopback port (each
aiokafka bootstrap attempt logs ``Unable connect to ...`` at ERROR; before the filter every one reached the log).
The recovery against a real broker that comes back: ``integration/test_broker_outage.py``.
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys

from streamgrpo.log import RedactingFilter, register_secret
from streamgrpo.topics.broker_logs import LOGGER_NAME, BrokerLogFilter
from streamgrpo.topics.outage import OutageLog, Repeats

FETCH = "Failed fetch messages from %s: %s"
NOT_READY = "NodeNotReadyError: Attempt to send a request to node which is not ready (node id 0)."


class Rig:
    def __init__(self, interval_s: float) -> None:
        self.now = 1_700_000_000.0
        self.out = io.StringIO()
        self.handler = logging.StreamHandler(self.out)
        self.handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.handler.addFilter(RedactingFilter())
        self.outages = 0
        self.filter = BrokerLogFilter(OutageLog("127.0.0.1:9", interval_s), Repeats(interval_s),
                                      on_outage=self.started, clock=lambda: self.now)
        self.handler.filters.insert(0, self.filter)
        self.second_out = io.StringIO()
        self.second = logging.StreamHandler(self.second_out)
        self.second.setFormatter(self.handler.formatter)
        self.second.addFilter(self.filter)

    def started(self) -> None:
        self.outages += 1

    def log(self, name: str, level: int, msg: str, *args: object) -> None:
        record = logging.LogRecord(name, level, __file__, 1, msg, args, None)
        self.handler.handle(record)
        self.second.handle(record)  # a second handler with the same filter: the record is not counted twice

    def recover(self) -> None:
        """The probe's call when the broker answers; its line goes to the :data:`LOGGER_NAME` logger."""
        logger = logging.getLogger(LOGGER_NAME)
        level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(self.handler)
        try:
            self.filter.reachable()
        finally:
            logger.removeHandler(self.handler)
            logger.setLevel(level)

    def lines(self) -> list[str]:
        return self.out.getvalue().splitlines()


def test_a_flood_of_client_errors_is_a_few_lines_and_one_recovery_line() -> None:
    register_secret("s3cr3t-sasl-pw")
    rig = Rig(interval_s=5.0)
    for i in range(2600):  # 250 lines/s for 10.4 s from three sources
        rig.now += 0.004
        rig.log("aiokafka.consumer.fetcher", logging.ERROR, FETCH, 0, NOT_READY)
        if i % 10 == 0:
            rig.log("librdkafka", logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1",
                    "127.0.0.1:9/1: Connect to ipv4#127.0.0.1:9 failed: Connection refused (s3cr3t-sasl-pw)")
            rig.log("aiokafka.consumer.group_coordinator", logging.WARNING, "Heartbeat session expired - marking "
                    "coordinator dead")
    rig.log("streamgrpo.judge.service", logging.WARNING, "not a client line: %s", "kept")
    rig.recover()
    lines = rig.lines()
    assert rig.outages == 1
    assert lines[0].startswith("WARNING streamgrpo.topics.broker: Kafka broker 127.0.0.1:9 unreachable: Failed fetch")
    summaries = [ln for ln in lines if "unreachable since" in ln]
    assert len(summaries) == 2 and len(lines) == 5, lines  # first, 2 summaries, the service's own line, recovery
    assert "WARNING streamgrpo.judge.service: not a client line: kept" in lines
    assert lines[-1].startswith("INFO streamgrpo.topics.broker: Kafka broker 127.0.0.1:9 reachable again after 10 s")
    assert "s3cr3t" not in rig.out.getvalue()
    assert rig.second_out.getvalue().splitlines() == lines[:-1]  # the same verdicts (the recovery goes to one)


def test_other_repeated_library_lines_are_bounded_per_interval_and_counted() -> None:
    rig = Rig(interval_s=5.0)
    for _ in range(100):  # the broker answers, a topic is missing: not an outage, still a flood
        rig.now += 0.06
        rig.log("aiokafka.cluster", logging.ERROR, "Topic %s not found in cluster metadata", "t.rollouts")
        rig.log("faust.transport.consumer", logging.WARNING, "Timer %s woke up too late", "commit")
    for fac in ("CONFWARN", "MSGTIMEOUT"):  # one template for every librdkafka line: different lines are kept
        rig.log("librdkafka", logging.WARNING, "%s [%s] %s", fac, "rdkafka#producer-1", f"{fac} text 17")
    lines = rig.lines()
    assert rig.outages == 0
    assert [ln.split(":")[0] for ln in lines] == (["ERROR aiokafka.cluster", "WARNING faust.transport.consumer"] * 2
                                                  + ["WARNING librdkafka"] * 2)
    assert lines[2].endswith("Topic t.rollouts not found in cluster metadata (83 similar line(s) suppressed)")


def test_faust_transport_lines_are_the_outage_but_an_agent_crash_is_not() -> None:
    rig = Rig(interval_s=30.0)
    rig.log("faust.transport.drivers.aiokafka", logging.ERROR, "Unable connect to node with id %s: %s", 0,
            "[Errno 111] Connect call failed ('127.0.0.1', 9)")
    rig.log("faust.agents.agent", logging.ERROR, "Agent crashed: %s", "KeyError")  # a bug: never swallowed
    rig.log("aiokafka.consumer.consumer", logging.ERROR, "any aiokafka line during the outage")
    for partition in range(8):  # Faust's transport, per partition: a consequence of the outage
        rig.log("faust.transport.drivers.aiokafka", logging.ERROR, "Aiokafka has not sent fetch request for %r "
                "since start (started %s)", f"TP(topic='t.rollouts', partition={partition})", "12 seconds ago")
    assert [ln.split(":")[0] for ln in rig.lines()] == ["WARNING streamgrpo.topics.broker", "ERROR faust.agents.agent"]


def test_a_heartbeat_refused_during_a_rebalance_is_not_an_outage() -> None:
    # every member of a group logs it on a normal rebalance, with the broker up; before, each said the broker was
    # unreachable ("is it running, and is [kafka] bootstrap right?") and then "reachable again after 5 s"
    rig = Rig(interval_s=5.0)
    for _ in range(3):
        rig.now += 1.0
        rig.log("aiokafka.consumer.group_coordinator", logging.WARNING,
                "Heartbeat failed for group %s because it is rebalancing", "t.streamgrpo-streams")
    lines = rig.lines()
    assert rig.outages == 0 and not rig.filter.outage.down
    assert lines == ["WARNING aiokafka.consumer.group_coordinator: Heartbeat failed for group t.streamgrpo-streams "
                     "because it is rebalancing"], lines  # kept, once per interval (a repeated library line)
    rig.log("aiokafka.consumer.group_coordinator", logging.WARNING, "Heartbeat failed: local member_id was not "
            "recognized; resetting and re-joining group")
    assert rig.outages == 0 and len(rig.lines()) == 2
    rig.log("aiokafka.consumer.group_coordinator", logging.WARNING, "Heartbeat session expired - marking "
            "coordinator dead")
    assert rig.outages == 1  # a heartbeat that really failed still starts one


SCRIPT = """
import asyncio, sys
from streamgrpo.log import setup_logging
setup_logging("INFO")
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError
from confluent_kafka import Producer
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.broker import free_port
from streamgrpo.topics.broker_logs import watch
from streamgrpo.topics.clients import aiokafka_config, client_config

kafka = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", outage_log_interval_s=60)
if sys.argv[1] == "watch":
    watch(kafka)

async def attempts():
    for _ in range(15):
        consumer = AIOKafkaConsumer("tasks", group_id="g", **aiokafka_config(kafka))
        try:
            await consumer.start()
        except KafkaConnectionError:
            pass
        finally:
            await consumer.stop()

asyncio.run(attempts())
producer = Producer(client_config(kafka))
producer.produce("tasks", b"x")
for _ in range(4):
    producer.poll(0.5)
"""


def client_lines(mode: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    return (proc.stdout + proc.stderr).splitlines()


def test_real_clients_against_a_closed_port_log_one_line_that_names_the_broker() -> None:
    unwatched = client_lines("plain")
    assert sum("Unable connect to" in ln for ln in unwatched) >= 15  # what a service logged before the filter
    lines = client_lines("watch")
    assert len(lines) == 1, lines
    assert "WARNING streamgrpo.topics.broker: Kafka broker 127.0.0.1:" in lines[0] and "unreachable" in lines[0]
