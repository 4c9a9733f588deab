"""A judge started before its broker waits for it (bounded logs) and still stops on SIGTERM.

The real ``streamgrpo judge`` subprocess against a closed loopback port (no broker): before, its consumer's start
raised ``KafkaConnectionError`` and the judge exited with a traceback at once (under k8s or ``streamgrpo run``: a
restart loop). Now it waits with backoff (:mod:`streamgrpo.topics.reconnect`), says once that the broker is
unreachable and then at most one summary per ``[kafka] outage_log_interval_s``, and exits 0 on SIGTERM. That it
then resumes when a broker answers: ``integration/test_broker_outage.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from streamgrpo.topics.broker import free_port

WAIT_S = 8.0


def test_a_judge_started_without_a_broker_waits_with_bounded_logs_and_stops_on_sigterm(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    config = tmp_path / "judge.toml"
    config.write_text(f'[kafka]\nbootstrap = "{bootstrap}"\noutage_log_interval_s = 5\n\n[judge]\nmetrics_port = 0\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
    env.update(STREAMGRPO_CONFIG=str(config), STREAMGRPO_HOME=str(tmp_path / "home"))
    log = tmp_path / "judge.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "judge"], env=env, stdout=sink,
                                stderr=subprocess.STDOUT)
    try:
        time.sleep(WAIT_S)
        alive = proc.poll() is None
        lines = log.read_text(errors="replace").splitlines()
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        rc = proc.wait(30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert alive, "\n".join(lines[-30:])
    assert sum(f"Kafka broker {bootstrap} unreachable: " in ln for ln in lines) == 1, lines
    assert len(lines) <= 4, lines  # "judge serving", the first line, at most two summaries
    assert rc == 0 and took < 15, (rc, took, log.read_text(errors="replace")[-3000:])
