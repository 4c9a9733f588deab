"""A trainer started before its broker trains once the broker is up, and one with a stored adapter waits too.

The real ``streamgrpo trainer`` (a tiny model as its base model) is started against a fixed port where no broker
listens yet. It must wait (one "unreachable" line), then, once an embedded broker is started on that port with the
topics and a step's worth of samples, train and announce v1, and exit 0 on SIGTERM. The broker is then stopped and
the trainer started again: now it has v1 stored, which before made it exit at once (the check that v1 was announced
read ``adapter-events`` without waiting: TopicsError, a restart loop); it must wait again and stop on SIGTERM.
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
from support.samples import make_samples
from support.tiny_model import saved_tiny_model

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.broker import EmbeddedBroker, free_port
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker

STEP = 2  # samples_per_step


class Trainer:
    """``streamgrpo trainer`` in a subprocess with its own log (stopped by pid)."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as sink:
            self.proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "trainer"], env=env, stdout=sink,
                                         stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_logged(self, text: str, timeout_s: float, count: int = 1) -> None:
        deadline = time.monotonic() + timeout_s
        while self.text().count(text) < count and time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the trainer exited:\n{self.text()[-3000:]}"
            time.sleep(0.2)
        assert self.text().count(text) >= count, f"{text!r} not logged within {timeout_s} s:\n{self.text()[-3000:]}"

    def sigterm(self) -> tuple[int | None, float]:
        self.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            rc = None
        return rc, time.monotonic() - sent

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def published(kafka: KafkaSettings) -> list[R.AdapterPublished]:
    return [r.event for r in read_topic(kafka, "adapter-events", timeout_s=10) if isinstance(r.event, R.AdapterPublished)]


@pytest.mark.fault
def test_a_trainer_started_before_its_broker_trains_once_it_is_up_and_waits_again_with_a_stored_adapter(
        tmp_path: Path) -> None:
    base = tmp_path / "base"
    model, tok = saved_tiny_model(base)
    port = free_port()
    broker = EmbeddedBroker(tmp_path / "broker", port=port)
    kafka = KafkaSettings(bootstrap=broker.bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", session_timeout_ms=3000)
    config = tmp_path / "streamgrpo.toml"
    config.write_text(
        f'[kafka]\nbootstrap = "{kafka.bootstrap}"\ntopic_prefix = "{kafka.topic_prefix}"\nsession_timeout_ms = 3000\n'
        f'outage_log_interval_s = 5\n\n'
        f'[loop]\nsamples_per_step = {STEP}\nmax_staleness = 4\nadapter_store = "{tmp_path / "adapters"}"\n\n'
        f'[trainer]\nbase_model = "{base}"\ndevice = "cpu"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = 0\n'
        'run_name = "broker-start"\npoll_timeout_ms = 500\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
    env.update(STREAMGRPO_CONFIG=str(config), STREAMGRPO_HOME=str(tmp_path / "home"))
    unreachable = f"Kafka broker {kafka.bootstrap} unreachable: "
    trainer = Trainer(config, env, tmp_path / "trainer.log")
    try:
        trainer.wait_logged(unreachable, 180)  # torch and the model load first
        time.sleep(3.0)
        assert trainer.proc.poll() is None, trainer.text()[-3000:]
        trainer.proc.send_signal(signal.SIGSTOP)  # it meets the broker with its topics and samples, as a durable one
        try:
            broker.start()
            ensure(kafka)
            with EventProducer(kafka, "test") as producer:
                for s in make_samples(tok, STEP, seed=41, model=model):
                    producer.send(s, key="one")
        finally:
            trainer.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 180
        while not published(kafka) and time.monotonic() < deadline:
            assert trainer.proc.poll() is None, trainer.text()[-3000:]
            time.sleep(1.0)
        assert [(p.adapter_name, p.version) for p in published(kafka)] == [("planner", 1)], trainer.text()[-3000:]
        rc, took = trainer.sigterm()
        assert rc == 0 and took < 15, (rc, took, trainer.text()[-3000:])

        broker.stop()  # the trainer now has v1 stored: it checks that v1 was announced, once the broker answers
        mark = trainer.text().count(unreachable)
        trainer = Trainer(config, env, tmp_path / "trainer.log")
        trainer.wait_logged(unreachable, 180, count=mark + 1)
        time.sleep(3.0)
        assert trainer.proc.poll() is None, trainer.text()[-3000:]
        rc, took = trainer.sigterm()
        assert rc == 0 and took < 15, (rc, took, trainer.text()[-3000:])
        assert "Traceback" not in trainer.text(), trainer.text()[-3000:]
    finally:
        trainer.kill()
        broker.stop()
