"""A judge started before its broker waits for it (bounded logs) and still stops on SIGTERM.

The real ``streamgrpo judge`` subprocess against a closed loopback port (no broker): before, its consumer's start
raised ``KafkaConnectionError`` and the judge exited with a traceback at once (under k8s or ``streamgrpo run``: a
restart loop). Now it waits with backoff (:mod:`streamgrpo.topics.reconnect`), says once that the broker is
unreachable and then at most one summary per ``[kafka] outage_log_interval_s``, and exits 0 on SIGTERM. That it
then resumes when a broker answers: ``integration/test_broker_outage.py``.
"""

from __future__ import annotations

from pathlib import Path

from support.no_broker import start_without_broker

WAIT_S = 8.0


def test_a_judge_started_without_a_broker_waits_with_bounded_logs_and_stops_on_sigterm(tmp_path: Path) -> None:
    run = start_without_broker("judge", tmp_path, "[judge]\nmetrics_port = 0\n", wait_s=WAIT_S)
    lines = run.lines
    assert run.alive, "\n".join(lines[-30:])
    assert sum(f"Kafka broker {run.bootstrap} unreachable: " in ln for ln in lines) == 1, lines
    assert len(lines) <= 4, lines  # "judge serving", the first line, at most two summaries
    assert run.rc == 0 and run.took < 15, (run.rc, run.took, run.text[-3000:])
