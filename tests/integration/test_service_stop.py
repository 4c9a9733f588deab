"""SIGTERM stops the judge and a rollout worker within :data:`STOP_BOUND_S` while they are back-pressured, and
what they held is not lost (issue 24, finding 1; the trainer: ``test_trainer_stop.py``; streams:
``test_streams_stop.py``).

Each service runs as the real CLI subprocess on the embedded broker:
- the judge holds a rollout whose task is not known yet (``task_wait_s`` long): after the stop and once the task
  is published, a restarted judge scores it (the held rollout's offset was not committed);
- a rollout worker holds a group whose adapter version was never published (``adapter_wait_s`` long): it emits
  nothing for it on the way out (no ERROR rollouts), and a restarted worker serves the group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker

STOP_BOUND_S = 15.0


class Service:
    """``streamgrpo <argv>`` in a subprocess with its own config file and log (stopped by pid)."""

    def __init__(self, tmp: Path, name: str, config: str, argv: list[str]) -> None:
        path = tmp / f"{name}.toml"
        path.write_text(config)
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
        env.update(STREAMGRPO_CONFIG=str(path), STREAMGRPO_HOME=str(tmp / "home"))
        self.log = tmp / f"{name}.log"
        with open(self.log, "ab") as sink:
            self.proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "--log-level", "DEBUG", *argv],
                                         env=env, stdout=sink, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_logged(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.text():
                return
            assert self.proc.poll() is None, f"exited early:\n{self.text()[-3000:]}"
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not logged within {timeout_s} s:\n{self.text()[-3000:]}")

    def sigterm(self) -> tuple[float, int | None]:
        """Seconds from SIGTERM to exit, and the exit code (killed after 60 s: code None)."""
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()
            return time.monotonic() - sent, None
        return time.monotonic() - sent, self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def kafka_toml(kafka: KafkaSettings) -> str:
    return f'[kafka]\nbootstrap = "{kafka.bootstrap}"\ntopic_prefix = "{kafka.topic_prefix}"\nsession_timeout_ms = 6000\n\n'


def completed(task_id: str, rollout: str, source: str = "test") -> R.RolloutCompleted:
    env = R.Envelope.new("rollout", task_id=task_id, group_id=f"g-{task_id}", rollout_id=rollout)
    return R.RolloutCompleted(envelope=env, question="What is 2+2?", source=source, final_answer="4", turns=1,
                              status=R.RolloutStatus.ANSWERED, group_size=1, adapter_name="planner",
                              adapter_version=0, duration_ms=1)


@pytest.mark.fault
def test_sigterm_stops_a_judge_holding_a_rollout_for_its_task(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    with EventProducer(kafka_ns, "test") as prod:
        prod.send(completed("late", "r-late"))
    config = kafka_toml(kafka_ns) + '[judge]\ntask_wait_s = 600\nmetrics_port = 0\npoll_timeout_ms = 500\n'
    judge = Service(tmp_path, "judge1", config, ["judge"])
    try:
        judge.wait_logged(" assigned [(", 120)
        time.sleep(3.0)  # r-late is polled and held: its task is unknown
        took, rc = judge.sigterm()
    finally:
        judge.kill()
    assert took < STOP_BOUND_S and rc == 0, (took, rc, judge.text()[-3000:])
    assert read_topic(kafka_ns, "rewards", timeout_s=5) == []  # nothing scored (nor rejected) on the way out
    with EventProducer(kafka_ns, "test") as prod:
        prod.send(R.Task(R.Envelope.new("test", task_id="late"), question="What is 2+2?", source="test",
                         group_size=1, ground_truths=["4"]))
    again = Service(tmp_path, "judge2", config, ["judge"])
    try:
        deadline, rewards = time.monotonic() + 90, []
        while not rewards and time.monotonic() < deadline:
            rewards = read_topic(kafka_ns, "rewards", timeout_s=5)
        took, rc = again.sigterm()
    finally:
        again.kill()
    assert [r.event.envelope.rollout_id for r in rewards] == ["r-late"], again.text()[-3000:]
    assert took < STOP_BOUND_S and rc == 0, (took, rc)


def tiny_base(path: Path) -> Path:
    from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

    build_tiny_model(0).save_pretrained(path)
    build_tiny_tokenizer().save_pretrained(path)
    return path


def request(i: int, version: int) -> R.RolloutRequest:
    env = R.Envelope.new("streams", task_id="t-wait", group_id="g-wait", rollout_id=f"r-wait-{i}")
    return R.RolloutRequest(envelope=env, question="What is 2+2?", source="test", rollout_index=i, group_size=2,
                            adapter_name="planner", adapter_version=version, max_turns=1,
                            sampling=R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=4))


def test_sigterm_stops_a_rollout_worker_waiting_for_its_adapter(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    base = tiny_base(tmp_path / "base")
    with EventProducer(kafka_ns, "test") as prod:
        for i in range(2):
            prod.send(request(i, version=5))  # v5 was never published: the group waits for it
    config = (kafka_toml(kafka_ns) + f'[loop]\nadapter_store = "{tmp_path / "adapters"}"\n\n'
              f'[rollout]\nmodel = "{base}"\ndevice = "cpu"\nmetrics_port = 0\nconcurrency = 1\n')
    worker = Service(tmp_path, "rollout1", config + "adapter_wait_s = 600\n", ["rollout"])
    try:
        worker.wait_logged("waiting for planner@v5", 180)
        time.sleep(1.0)
        took, rc = worker.sigterm()
    finally:
        worker.kill()
    assert took < STOP_BOUND_S and rc == 0, (took, rc, worker.text()[-3000:])
    assert read_topic(kafka_ns, "rollouts", timeout_s=5) == []  # no ERROR rollouts for a group cut short
    again = Service(tmp_path, "rollout2", config + "serve_resident_fallback = true\nadapter_wait_s = 1\n",
                    ["rollout"])
    try:
        deadline, done = time.monotonic() + 120, []
        while len(done) < 2 and time.monotonic() < deadline:
            done = read_topic(kafka_ns, "rollouts", timeout_s=5)
        took, rc = again.sigterm()
    finally:
        again.kill()
    assert sorted(r.event.envelope.rollout_id for r in done) == ["r-wait-0", "r-wait-1"], again.text()[-3000:]
    assert took < STOP_BOUND_S and rc == 0, (took, rc)
