"""Services beat the liveness file from their main loop; `streamgrpo-probe live` reads it.

The judge runs in-process; a streams worker runs as the real subprocess (`streamgrpo streams`).
The trainer and rollout worker beats are checked in their own integration tests.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from support.streams import WorkerProcess

from streamgrpo import heartbeat
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.service import JudgeService

pytestmark = pytest.mark.broker

PROBE = Path(__file__).resolve().parents[2] / "k8s" / "image" / "probe.py"


def load_probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_probe_hb", PROBE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["k8s_probe_hb"] = module
    spec.loader.exec_module(module)
    return module


def test_judge_beats_while_it_polls(kafka_ns: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beat = tmp_path / "judge.hb"
    monkeypatch.setenv(heartbeat.ENV, str(beat))
    started = time.time()
    service = JudgeService(kafka_ns, JudgeSettings(poll_timeout_ms=100, consumer_group="judge-hb"))
    asyncio.run(asyncio.wait_for(service.run(max_idle_s=2.0), timeout=120))
    service.close()
    assert beat.exists() and os.path.getmtime(beat) >= started - 1
    probe = load_probe()
    env = {heartbeat.ENV: str(beat)}
    assert probe.main(["live", "--max-age", "60"], env) == 0
    assert probe.live(env, max_age=60, now=time.time() + 120)[0] is False  # a stopped loop goes stale


def test_streams_worker_keeps_beating(kafka_ns: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beat = tmp_path / "streams.hb"
    monkeypatch.setenv(heartbeat.ENV, str(beat))  # inherited by the worker subprocess
    worker = WorkerProcess(kafka_ns, "window", tmp_path / "data")
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not beat.exists():
            assert worker.alive(), worker.log_text()[-3000:]
            time.sleep(0.5)
        assert beat.exists(), worker.log_text()[-3000:]
        first = os.path.getmtime(beat)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and os.path.getmtime(beat) == first:
            time.sleep(0.5)
        assert os.path.getmtime(beat) > first, "the streams worker stopped beating"
    finally:
        worker.stop()
