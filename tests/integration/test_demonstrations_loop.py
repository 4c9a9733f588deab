"""Demonstrations on the real broker, as a user brings them: ``streamgrpo submit --demos FILE`` -> fan-out (a group
of one per demonstration) -> the rollout worker executes the given steps with the real tools -> the judge vets it
(a wrong or broken demonstration is a dead letter with its reason) -> the window emits one likelihood sample per good
demonstration -> the trainer trains on it and publishes a version whose lineage holds it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.streams import WorkerProcess
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.analysis.views import connect
from streamgrpo.archive.store import parts
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.service import JudgeService
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.runtime import build_context
from streamgrpo.rollout.worker import RolloutWorker
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.loop import run_trainer

pytestmark = pytest.mark.broker

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "demos.jsonl"  # the README's example
BROKEN = [
    {"question": "What is 5 times 9?", "answer": "45", "source": "builtin",  # the demonstrator miscopied
     "steps": [{"tool": "calculator", "input": "5*9"}, {"answer": "54"}]},
    {"question": "What is 3 times 3?", "answer": "9", "source": "builtin",  # a tool the agent does not have
     "steps": [{"tool": "abacus", "input": "3*3"}, {"answer": "9"}]},
]


def wait(kafka: KafkaSettings, topic: str, n: int, timeout_s: float = 90) -> list[R.Event]:
    deadline = time.monotonic() + timeout_s
    got: list[R.Event] = []
    while time.monotonic() < deadline:
        got = [r.event for r in read_topic(kafka, topic, timeout_s=5) if r.event is not None]
        if len(got) >= n:
            break
        time.sleep(0.5)
    return got


def submit(kafka: KafkaSettings, path: Path) -> str:
    """``streamgrpo submit --demos FILE`` as a user runs it (a real process)."""
    env = dict(os.environ, STREAMGRPO_BOOTSTRAP=kafka.bootstrap or "", STREAMGRPO_KAFKA__TOPIC_PREFIX=kafka.topic_prefix)
    proc = subprocess.run([sys.executable, "-m", "streamgrpo.cli", "submit", "--demos", str(path)], env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def execute(kafka: KafkaSettings, n: int) -> None:
    cfg = RolloutConfig(concurrency=4, linger_ms=200, follow_adapters=False,
                        tools={"enabled": ["calculator", "knowledge_search"]})
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())
    producer = EventProducer(kafka, cfg.service)
    try:
        worker = RolloutWorker(cfg, kafka, build_context(cfg, policy), producer)
        asyncio.run(asyncio.wait_for(worker.run(asyncio.Event(), max_rollouts=n), 300))
    finally:
        producer.close()
        policy.close()


def judge(kafka: KafkaSettings) -> None:
    service = JudgeService(kafka, JudgeSettings())
    try:
        asyncio.run(asyncio.wait_for(service.run(max_idle_s=4.0), 120))
    finally:
        service.close()


def test_submitted_demonstrations_are_executed_vetted_and_trained(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    path = tmp_path / "demos.jsonl"
    path.write_text(EXAMPLE.read_text() + "".join(json.dumps(d) + "\n" for d in BROKEN))
    good = len(EXAMPLE.read_text().splitlines())
    archive = tmp_path / "archive"
    streams = WorkerProcess(kafka_ns, "fanout,window,archive", tmp_path / "data",
                            {"max_turns": 3, "archive_dir": archive, "archive_roll_s": 1, "max_groups_in_flight": 8})
    try:
        assert f"published {good + 2} demonstration(s)" in submit(kafka_ns, path)
        requests = wait(kafka_ns, "rollout-requests", good + 2)
        assert len(requests) == good + 2, streams.log_text()[-3000:]
        assert all(r.group_size == 1 and r.demonstration is not None for r in requests)  # a group of one each
        assert {r.demonstration.source for r in requests} == {"file:demos.jsonl"}  # type: ignore[union-attr]
        execute(kafka_ns, good + 2)
        judge(kafka_ns)
        samples = wait(kafka_ns, "training-samples", good)
        closed = wait(kafka_ns, "groups", good + 2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (parts(archive / "rollouts") and parts(archive / "groups")):
            time.sleep(0.5)
        time.sleep(2)  # the roll after the last records
    finally:
        streams.stop()
    letters = {d.reason_code: d.reason for d in wait(kafka_ns, "dead-letters", 2) if isinstance(d, R.DeadLetter)}
    assert set(letters) == {"demonstration_wrong", "demonstration_failed"}, letters
    assert "'54'" in letters["demonstration_wrong"] and "abacus" in letters["demonstration_failed"]
    assert sorted(g.reason for g in closed) == ["demonstration"] * good + ["demonstration_rejected"] * 2
    assert len(samples) == good
    for sample in samples:
        assert (sample.demo_source, sample.advantage, sample.reward) == ("file:demos.jsonl", 1.0, 1.0)
        assert all(t.action_token_ids and set(t.behaviour_logprobs) == {0.0} for t in sample.turns)
    assert sorted(len(s.turns) for s in samples) == [2, 2, 3]
    con = connect(archive)  # what `streamgrpo analyse` reads
    rows = con.execute("SELECT demo_source, group_reason, count(*) FROM trajectories GROUP BY ALL ORDER BY 2").fetchall()
    assert rows == [("file:demos.jsonl", "demonstration", good), ("file:demos.jsonl", "demonstration_rejected", 2)]

    base = tmp_path / "tiny-base"
    build_tiny_model().save_pretrained(base)
    build_tiny_tokenizer().save_pretrained(base)
    cfg = TrainerConfig(base_model=str(base), adapter_store=tmp_path / "store", device="cpu", lora_rank=4,
                        lora_alpha=8, samples_per_step=good, max_steps=1, idle_exit_s=5.0, poll_timeout_ms=200)
    (published,) = asyncio.run(run_trainer(cfg, kafka_ns))
    assert published.metrics["demonstrations"] == good and published.metrics["warm_start"] == 1.0
    assert published.metrics["lr"] == pytest.approx(cfg.demo_lr)
    assert sum(r.end - r.start + 1 for r in published.lineage if r.topic.endswith("training-samples")) == good
