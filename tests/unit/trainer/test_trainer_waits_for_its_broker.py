"""A trainer started before its broker waits for it (bounded logs) and still stops on SIGTERM.

The real ``streamgrpo trainer`` subprocess (a tiny model saved as its base model) against a closed loopback port (no
broker): before, it waited at most 120 s for its ``adapter-events`` follower to read the history without looking at
its stop signal (SIGTERM did nothing), then exited with a TimeoutError traceback (under k8s or ``streamgrpo run``: a
restart loop); with a stored adapter it exited at once on the announce check's snapshot read. Now it waits with
backoff (:mod:`streamgrpo.topics.reconnect`), says once that the broker is unreachable and then at most one summary
per ``[kafka] outage_log_interval_s``, and exits 0 on SIGTERM. That it then trains when a broker answers, and waits
with a stored adapter too: ``integration/test_trainer_broker_start.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.tiny_model import tiny_model

from streamgrpo.topics.broker import free_port

WAIT_S = 8.0


def test_a_trainer_started_without_a_broker_waits_with_bounded_logs_and_stops_on_sigterm(tmp_path: Path) -> None:
    model, tok = tiny_model(0)
    base = tmp_path / "base"
    model.save_pretrained(base)
    tok.save_pretrained(base)
    bootstrap = f"127.0.0.1:{free_port()}"
    config = tmp_path / "trainer.toml"
    config.write_text(
        f'[kafka]\nbootstrap = "{bootstrap}"\noutage_log_interval_s = 5\n\n'
        f'[loop]\nadapter_store = "{tmp_path / "adapters"}"\n\n'
        f'[trainer]\nbase_model = "{base}"\ndevice = "cpu"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = 0\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
    env.update(STREAMGRPO_CONFIG=str(config), STREAMGRPO_HOME=str(tmp_path / "home"))
    log = tmp_path / "trainer.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "trainer"], env=env, stdout=sink,
                                stderr=subprocess.STDOUT)
    first = f"Kafka broker {bootstrap} unreachable: "
    try:
        deadline = time.monotonic() + 180  # torch and the model load first
        while first not in log.read_text(errors="replace") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(WAIT_S)
        alive = proc.poll() is None
        lines = log.read_text(errors="replace").splitlines()
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        rc = proc.wait(150)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text(errors="replace")
    assert alive, "\n".join(lines[-30:])
    assert sum(first in ln for ln in lines) == 1, lines
    since = lines[next(i for i, ln in enumerate(lines) if first in ln):]
    assert len(since) <= 3, since  # the first line, at most two summaries in WAIT_S at a 5 s interval
    assert rc == 0 and took < 15, (rc, took, text[-3000:])
    assert "Traceback" not in text, text[-3000:]
