"""SIGTERM stops a trainer that holds fewer samples than a step (issue 24, finding 2), and nothing is committed.

The trainer runs as the real CLI subprocess (``streamgrpo trainer``) on the embedded broker with a tiny model; it
is sent SIGTERM while ``collect()`` waits for a step's worth of samples with only some of them polled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings, load
from streamgrpo.topics.consumer import EventConsumer
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.loop import SAMPLES_TOPIC, SERVICE

pytestmark = pytest.mark.broker

STOP_BOUND_S = 15.0
HELD = 3  # samples published: one short of samples_per_step


def wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"the trainer exited early:\n{path.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not logged within {timeout_s} s:\n{path.read_text()[-3000:]}")


def test_sigterm_stops_a_trainer_short_of_a_step_without_committing(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    model, tok = tiny_model(0)
    base = tmp_path / "base"
    model.save_pretrained(base)
    tok.save_pretrained(base)
    with EventProducer(kafka_ns, "test") as producer:
        for s in make_samples(tok, HELD, seed=31, model=model):
            producer.send(s, key="one")
    config = tmp_path / "streamgrpo.toml"
    config.write_text(
        f'[kafka]\ntopic_prefix = "{kafka_ns.topic_prefix}"\nsession_timeout_ms = 3000\n\n'
        f'[loop]\nsamples_per_step = {HELD + 1}\nmax_staleness = 4\nadapter_store = "{tmp_path / "adapters"}"\n\n'
        f'[trainer]\nbase_model = "{base}"\ndevice = "cpu"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = 0\n'
        'run_name = "stop"\npoll_timeout_ms = 500\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
    env.update(STREAMGRPO_CONFIG=str(config), STREAMGRPO_HOME=str(tmp_path / "home"))
    out = tmp_path / "trainer.log"
    argv = [sys.executable, "-m", "streamgrpo.cli", "--log-level", "DEBUG", "trainer", "--bootstrap",
            kafka_ns.bootstrap or ""]
    with open(out, "wb") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_for(out, f"the intake holds {HELD} ", proc, timeout_s=180)  # in collect(), one sample short of a step
        time.sleep(1.0)  # a few more empty polls: it is waiting, not about to return
        assert proc.poll() is None
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = out.read_text(errors="replace")
    assert took < STOP_BOUND_S, f"SIGTERM took {took:.1f} s:\n{log[-3000:]}"
    assert rc == 0, log[-3000:]
    assert f"stopping on request: {HELD} records taken and 0 held since the last adapter stay uncommitted" in log

    assert not any(isinstance(r.event, R.AdapterPublished) for r in read_topic(kafka_ns, "adapter-events"))
    assert not (tmp_path / "adapters" / "planner").exists() or not any((tmp_path / "adapters" / "planner").iterdir())
    cfg = load(TrainerConfig, "trainer", path=config, environ=env)

    async def reread() -> list[R.TrainingSample]:  # the trainer's group reads every held sample again
        got: list[R.TrainingSample] = []
        async with EventConsumer(kafka_ns, cfg.group_id, [SAMPLES_TOPIC], SERVICE, commit_on_revoke=False) as c:
            for _ in range(60):
                got += [r.event for r in await c.poll(10, 250) if isinstance(r.event, R.TrainingSample)]
                if len(got) >= HELD:
                    break
        return got

    assert len(asyncio.run(reread())) == HELD  # nothing was committed past the held samples
