"""Kill-and-resume: every training-samples offset is trained exactly once across trainer crashes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from support.lineage import assert_trained_exactly_once
from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.models import adapter_store as store
from streamgrpo.topics.consumer import EventConsumer
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.loop import SAMPLES_TOPIC, SERVICE, collect, publish, resume, run_trainer, train_step

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    model, tok = tiny_model(0)
    path = tmp_path_factory.mktemp("tiny-base-resume")
    model.save_pretrained(path)
    return path, model, tok


def publish_samples(kafka, samples):
    with EventProducer(kafka, "test") as prod:
        for s in samples:
            prod.send(s)


def cli_args(kafka, base, run_name):
    return [sys.executable, "-m", "streamgrpo.trainer.cli", "--bootstrap", kafka.bootstrap, "--topic-prefix",
            kafka.topic_prefix, "--base-model", str(base), "--device", "cpu",
            "--run-name", run_name, "--lora-rank", "4", "--lora-alpha", "8",
            "--publish-every", "1", "--poll-timeout-ms", "200", "--idle-exit-s", "4", "--lr", "1e-3"]


#: [loop] settings of the CLI runs: one sample per step; all samples are behaviour version 0, so none may be
#: dropped as stale
LOOP_ENV = {"STREAMGRPO_LOOP__SAMPLES_PER_STEP": "1", "STREAMGRPO_LOOP__MAX_STALENESS": "1000"}


@pytest.mark.fault
def test_sigkilled_trainer_resumes_without_gap_or_overlap(kafka_ns, tiny_base, tmp_path):
    base, model, tok = tiny_base
    n = 40
    publish_samples(kafka_ns, make_samples(tok, n, seed=7, model=model))
    args = cli_args(kafka_ns, base, "kill")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **LOOP_ENV, "STREAMGRPO_LOOP__ADAPTER_STORE": str(tmp_path)}

    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while len(store.versions(tmp_path, "planner")) < 2:
        assert first.poll() is None, first.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "trainer did not publish two versions in time"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    killed_at = len(store.versions(tmp_path, "planner"))
    assert killed_at < n, "the first trainer finished before it was killed; the test proves nothing"

    second = subprocess.run(args, env=env, capture_output=True, timeout=300)
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    assert b"resumed planner" in second.stderr

    versions = assert_trained_exactly_once(kafka_ns, tmp_path)
    assert versions[-1] == n  # one sample per step, every sample trained once


def test_crash_between_store_and_commit_is_not_trained_twice(kafka_ns, tiny_base, tmp_path):
    """Deterministic version of the worst crash window: v1 stored and announced, offsets NOT committed."""
    base, model, tok = tiny_base
    publish_samples(kafka_ns, make_samples(tok, 6, seed=8, model=model))
    cfg = TrainerConfig(base_model=str(base), adapter_store=tmp_path, device="cpu", lora_rank=4, lora_alpha=8,
                        samples_per_step=2, max_staleness=4, run_name="window", idle_exit_s=4.0,
                        poll_timeout_ms=200)

    async def crash_after_publish() -> None:
        state = resume(cfg)
        with EventProducer(kafka_ns, SERVICE) as producer:
            async with EventConsumer(kafka_ns, cfg.group_id, [SAMPLES_TOPIC], SERVICE) as consumer:
                samples = await collect(consumer, state, cfg)
                train_step(state, samples, cfg)
                publish(producer, state, cfg)  # stored + announced; the process "dies" before commit

    asyncio.run(crash_after_publish())
    published = asyncio.run(run_trainer(cfg, kafka_ns))
    assert [e.version for e in published] == [2, 3]
    assert_trained_exactly_once(kafka_ns, tmp_path)


def test_crash_between_store_and_announce_announces_on_restart(kafka_ns, tiny_base, tmp_path):
    base, model, tok = tiny_base
    publish_samples(kafka_ns, make_samples(tok, 4, seed=9, model=model))
    cfg = TrainerConfig(base_model=str(base), adapter_store=tmp_path, device="cpu", lora_rank=4, lora_alpha=8,
                        samples_per_step=2, max_staleness=4, run_name="announce", idle_exit_s=4.0,
                        poll_timeout_ms=200)

    class DeadProducer(EventProducer):
        def send(self, event, **kw):  # the process dies right after storing the adapter
            raise KeyboardInterrupt

    async def crash_before_announce() -> None:
        state = resume(cfg)
        async with EventConsumer(kafka_ns, cfg.group_id, [SAMPLES_TOPIC], SERVICE) as consumer:
            samples = await collect(consumer, state, cfg)
            train_step(state, samples, cfg)
            with pytest.raises(KeyboardInterrupt):
                publish(DeadProducer(kafka_ns, SERVICE), state, cfg)

    asyncio.run(crash_before_announce())
    assert store.versions(tmp_path, "planner") == [1]
    assert not [r for r in read_topic(kafka_ns, "adapter-events")]
    published = asyncio.run(run_trainer(cfg, kafka_ns))
    assert [e.version for e in published] == [2]
    assert assert_trained_exactly_once(kafka_ns, tmp_path) == [1, 2]


def test_a_resent_sample_after_a_restart_is_not_trained_twice(kafka_ns, tiny_base, tmp_path):
    """The window sends a sample at least once: a copy (same event id) can land after the offsets the stored
    adapter covers. A restarted trainer remembers the ids it trained on and drops the copy as a duplicate."""
    base, model, tok = tiny_base
    first, later = make_samples(tok, 2, seed=10, model=model), make_samples(tok, 2, seed=11, model=model)
    publish_samples(kafka_ns, first)
    cfg = TrainerConfig(base_model=str(base), adapter_store=tmp_path, device="cpu", lora_rank=4, lora_alpha=8,
                        samples_per_step=2, max_staleness=4, run_name="resend", idle_exit_s=4.0,
                        poll_timeout_ms=200)
    assert [e.version for e in asyncio.run(run_trainer(cfg, kafka_ns))] == [1]
    publish_samples(kafka_ns, [first[0], *later])  # the resend of an already-trained sample, then new ones
    published = asyncio.run(run_trainer(cfg, kafka_ns))
    assert [e.version for e in published] == [2]
    assert published[0].metrics.get("dropped_duplicate") == 1.0
    assert published[0].drops == {"duplicate": 1} and published[0].samples_dequeued == 2  # typed (contract v4)
    lineage = {(r.partition, o) for r in published[0].lineage for o in range(r.start, r.end + 1)}
    assert len(lineage) == 3  # the copy was consumed (and dropped) with the two new samples
