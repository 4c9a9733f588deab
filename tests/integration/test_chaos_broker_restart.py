"""The chaos campaign's broker restart (tests/support/broker_restart.py, driven by the ChaosMonkey): the loop's
processes are frozen while the broker's log is taken, run without a broker during the outage, and meet a new
broker on the same port holding every record at its old offset (key, value, headers, timestamp; a tombstone; a
topic outside the catalog, as Faust's changelogs are) and every group's committed offsets. A real Tansu broker
and a real process tree standing in for ``streamgrpo run``: a shell whose child appends a time stamp to a file
every 50 ms, so the freezes and the outage show in its file."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker_restart import snapshot
from support.chaos import ChaosMonkey

from streamgrpo.topics.broker import EmbeddedBroker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]

TICKER = "while true; do date +%s.%N >> {out}; sleep 0.05; done"


def _fill(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("x.rollouts", 3, 1), NewTopic("x.app-table-changelog", 2, 1)]).values():
        f.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        producer.produce("x.rollouts", value=b"v%d" % i, key=b"k%d" % i, partition=i % 3,
                         headers=[("h", b"%d" % i)], timestamp=1_700_000_000_000 + i)
    producer.produce("x.app-table-changelog", value=None, key=b"gone", partition=1)  # a tombstone
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "x.judge", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("x.rollouts", 0, 4), TopicPartition("x.rollouts", 2, 7)],
                    asynchronous=False)
    consumer.close()


def _ticks(path: Path) -> list[float]:
    return [float(line) for line in path.read_text().split()]


def test_the_broker_comes_back_with_its_log_and_offsets_and_the_loop_meets_the_outage(tmp_path: Path) -> None:
    out = tmp_path / "ticks"
    with EmbeddedBroker(tmp_path / "broker") as broker:
        _fill(broker.bootstrap)
        before = snapshot(broker.bootstrap)
        root = subprocess.Popen(["sh", "-c", f"sh -c '{TICKER.format(out=out)}' & wait"], start_new_session=True)
        try:
            time.sleep(0.5)
            old_pid = broker.proc.pid if broker.proc else None
            monkey = ChaosMonkey(root.pid, duration_s=4.0, interval_s=(0.2, 0.2), services=("none",),
                                 warmup_s=0.0, broker=broker, broker_restarts=1, outage_s=2.0)
            monkey.start()
            monkey.join(60)
            assert monkey.broker_error is None
            assert len(monkey.broker_restarts) == 1, monkey.broker_restarts
            restart = monkey.broker_restarts[0]
            assert broker.proc is not None and broker.proc.pid != old_pid  # a new broker process
            after = snapshot(broker.bootstrap)
            time.sleep(0.5)
            assert root.poll() is None  # the loop lived through it, thawed
            ticks = _ticks(out)
        finally:
            root.kill()
            subprocess.run(["pkill", "-f", str(out)], check=False)
    assert after.topics == before.topics == {"x.rollouts": 3, "x.app-table-changelog": 2}
    assert after.records == before.records and len(after.records) == 31
    assert after.offsets == before.offsets == {"x.judge": [("x.rollouts", 0, 4), ("x.rollouts", 2, 7)]}
    assert restart["records"] == 31 and restart["committed_offsets"] == 2 and restart["groups"] == 1
    # the ticker ran during the 2 s outage (a tick every ~50 ms), not frozen through it, and went on after
    during = [t for t in ticks if restart["outage_from"] < t < restart["outage_to"]]
    assert len(during) >= 10, (len(during), restart)
    assert ticks[-1] > restart["outage_to"], restart


def test_broker_restarts_need_the_broker() -> None:
    with pytest.raises(ValueError, match="needs the broker"):
        ChaosMonkey(1, duration_s=1.0, broker_restarts=1)
