"""A dead embedded broker is noticed, reaped and reported as a failed run (issue 24, finding 3; the whole
`streamgrpo run` is exercised by tests/e2e/test_run_broker_death.py).

Real parts: a real child process standing for the broker (SIGKILLed as in the finding), the real report writer
and a real Progress."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from streamgrpo.cli.progress import Progress
from streamgrpo.cli.report import write_report
from streamgrpo.cli.supervision import broker_death


def test_broker_death_says_why_and_reaps_the_process(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert broker_death(proc, tmp_path / "broker.log") is None  # running
        assert broker_death(None, tmp_path / "broker.log") is None  # a broker the run did not start
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        why = broker_death(proc, tmp_path / "broker.log")
    finally:
        proc.kill()
        proc.wait()
    assert why is not None and f"pid {proc.pid}" in why and "code -9" in why and "broker.log" in why
    assert proc.returncode == -9  # reaped: no zombie left behind


def test_a_failed_run_report_says_so_first(tmp_path: Path) -> None:
    why = "the embedded broker (pid 1) exited with code -9"
    write_report(Progress(), tmp_path / "failed", [], why)
    write_report(Progress(), tmp_path / "ok", [])
    failed = json.loads((tmp_path / "failed" / "summary.json").read_text())
    ok = json.loads((tmp_path / "ok" / "summary.json").read_text())
    assert failed["failed"] == why and "failed" not in ok
    md = (tmp_path / "failed" / "summary.md").read_text().splitlines()
    assert md[2].startswith(f"**RUN FAILED**: {why}")
    assert "RUN FAILED" not in (tmp_path / "ok" / "summary.md").read_text()
