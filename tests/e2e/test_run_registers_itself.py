"""`streamgrpo run` registers itself in the home while it runs and marks itself finished at exit, so that a
second terminal's `streamgrpo status` finds its embedded broker with no flags (a real `run`, its own embedded
broker and services; SIGINT as Ctrl-C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_run_registers_itself_and_status_finds_it_without_flags(tmp_path: Path, model_cache: Path) -> None:
    home = tmp_path / "home"
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(f'[loop]\nmodel_cache = "{model_cache}"\n\n[evaluator]\nenabled = false\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO")}
    # SIGINT at its default in the child, as in a terminal: a test runner started in the background (`cmd &` in a
    # non-interactive shell) ignores SIGINT, children inherit that, and the run would not see the Ctrl-C below
    proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "--config", str(cfg), "run", "--home", str(home),
                             "--duration", "300", "--limit", "1", "--no-final-eval"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        records: list[Path] = []
        while not records and time.monotonic() < deadline and proc.poll() is None:
            records = sorted((home / "runs").glob("*.json")) if (home / "runs").is_dir() else []
            time.sleep(0.5)
        assert records, "run wrote no record in <home>/runs"
        record = json.loads(records[0].read_text())
        assert record["pid"] == proc.pid and record["finished_at"] is None
        assert record["run_dir"] == str(home / "runs" / record["run_id"])
        second = subprocess.run([sys.executable, "-m", "streamgrpo.cli", "status", "--json", "--timeout", "0.5"],
                                env={**env, "STREAMGRPO_HOME": str(home)}, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr[-2000:]
        report = json.loads(second.stdout)
        assert (report["bootstrap"], report["run_id"]) == (record["bootstrap"], record["run_id"])
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=180)
    assert f"run {record['run_id']} (registered in" in out
    assert json.loads(records[0].read_text())["finished_at"] is not None
