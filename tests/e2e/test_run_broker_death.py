"""`streamgrpo run` notices that its embedded broker died (issue 24, finding 3).

The real `streamgrpo run` (its own embedded Tansu broker, streams, judge, a rollout worker and the trainer on a
tiny untrained model) is running when the broker is SIGKILLed. The run must say so, stop every child, write a
report that says the run failed (no final evaluation against a broker that is gone) and exit non-zero, within
:data:`NOTICE_BOUND_S`; before, it went on to the end of --duration and exited 0 with a normal report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.chaos import children
from support.tiny_planner import QUESTIONS
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NOTICE_BOUND_S = 60.0  # SIGKILL of the broker -> the run has exited (children stopped, report written)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_run_fails_loudly_when_its_embedded_broker_dies(tmp_path: Path) -> None:
    base = tmp_path / "base"
    build_tiny_model(0).save_pretrained(base)
    build_tiny_tokenizer().save_pretrained(base)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": q, "answer": a, "source": "math"}) + "\n" for q, a in QUESTIONS))
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(f'[rollout]\nmodel = "{base}"\nmetrics_port = 0\n\n'
                   f'[trainer]\nbase_model = "{base}"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = 0\n\n'
                   "[streams]\nmetrics_port = 0\n\n[judge]\nmetrics_port = 0\n\n[evaluator]\nenabled = false\n")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
    env.update(STREAMGRPO_CONFIG=str(cfg))
    out = tmp_path / "run.out"
    with open(out, "wb") as sink:
        run = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "run", "--home", str(home), "--tasks",
                                str(tasks), "--duration", "400", "--group-size", "2"],
                               env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while "submitted " not in out.read_text(errors="replace") and time.monotonic() < deadline:
            assert run.poll() is None, out.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        time.sleep(10.0)  # the services are up and talking to the broker
        kids = children(run.pid)
        broker = [p for p in kids if "tansu" in _cmdline(p).lower()]
        services = [p for p in kids if p not in broker]
        assert len(broker) == 1 and len(services) >= 4, [_cmdline(p) for p in kids]
        os.kill(broker[0], signal.SIGKILL)
        killed = time.monotonic()
        rc = run.wait(NOTICE_BOUND_S + 60)
        took = time.monotonic() - killed
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    text = out.read_text(errors="replace")
    print(f"broker SIGKILL -> run exited {took:.1f} s later, rc {rc}")
    assert rc not in (0, None) and took < NOTICE_BOUND_S, (rc, took, text[-3000:])
    assert f"the embedded broker (pid {broker[0]}) exited with code -9" in text and "the run failed" in text, text
    assert "error: the run failed" in text
    after = text[text.index("submitted "):].splitlines()  # the run's own lines (its children log to files)
    assert not any("Traceback" in ln for ln in after), text[-3000:]  # before: the progress follower's CancelledError
    assert sum("aiokafka" in ln for ln in after) <= 2, after  # before: 75 raw client errors in 2.5 s
    alive = [p for p in services if Path(f"/proc/{p}").exists() and "streamgrpo" in _cmdline(p)]
    assert not alive, [_cmdline(p) for p in alive]  # every service child was stopped
    (report,) = home.glob("runs/*/report")
    assert json.loads((report / "summary.json").read_text())["failed"].startswith("the embedded broker")
    assert "**RUN FAILED**" in (report / "summary.md").read_text()
    assert not list(report.glob("heldout_*")) and "final evaluation" not in text.lower()
