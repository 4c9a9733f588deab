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

from pathlib import Path

from support.no_broker import start_without_broker
from support.tiny_model import tiny_model

WAIT_S = 8.0


def test_a_trainer_started_without_a_broker_waits_with_bounded_logs_and_stops_on_sigterm(tmp_path: Path) -> None:
    model, tok = tiny_model(0)
    base = tmp_path / "base"
    model.save_pretrained(base)
    tok.save_pretrained(base)
    run = start_without_broker(
        "trainer", tmp_path,
        f'[loop]\nadapter_store = "{tmp_path / "adapters"}"\n\n'
        f'[trainer]\nbase_model = "{base}"\ndevice = "cpu"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = 0\n',
        wait_s=WAIT_S, ready_timeout_s=180, exit_timeout_s=150)  # torch and the model load first
    lines, first = run.lines, run.unreachable
    assert run.alive, "\n".join(lines[-30:])
    assert sum(first in ln for ln in lines) == 1, lines
    since = lines[next(i for i, ln in enumerate(lines) if first in ln):]
    assert len(since) <= 3, since  # the first line, at most two summaries in WAIT_S at a 5 s interval
    assert run.rc == 0 and run.took < 15, (run.rc, run.took, run.text[-3000:])
    assert "Traceback" not in run.text, run.text[-3000:]
