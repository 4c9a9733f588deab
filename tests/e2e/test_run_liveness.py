"""A `streamgrpo run` that stops making progress is not a success (issue 38, the liveness rule).

The real `streamgrpo run` (its own embedded Tansu broker, streams, judge, a rollout worker and the trainer on a tiny
untrained model) with ``[loop] liveness_s = 10``: once groups are in flight the rollout worker is frozen (SIGSTOP),
so no rollout completes. The progress line must say STALLED, the report must say the run failed because it stalled,
and the run must exit 2. Before the rule the run went on to the end of --duration and exited 0 with a normal report.
The negative side (a healthy run raises no stall) is every other e2e run, which exits 0 under the default bound.
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

BOUND_S = 10


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_a_run_whose_rollout_worker_freezes_fails_as_stalled(tmp_path: Path) -> None:
    base = tmp_path / "base"
    build_tiny_model(0).save_pretrained(base)
    build_tiny_tokenizer().save_pretrained(base)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": q, "answer": a, "source": "math"}) + "\n"
                             for q, a in QUESTIONS * 8))  # more than the worker serves before it is frozen
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(f"[loop]\nliveness_s = {BOUND_S}\n\n"
                   f'[rollout]\nmodel = "{base}"\nmetrics_port = 0\n\n'
                   f'[trainer]\nbase_model = "{base}"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = 0\n\n'
                   "[streams]\nmetrics_port = 0\n\n[judge]\nmetrics_port = 0\n\n[evaluator]\nenabled = false\n")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
    env.update(STREAMGRPO_CONFIG=str(cfg))
    out = tmp_path / "run.out"
    frozen: list[int] = []
    with open(out, "wb") as sink:
        run = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "run", "--home", str(home), "--tasks",
                                str(tasks), "--duration", "75", "--group-size", "2", "--no-final-eval"],
                               env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while " | rollouts " not in out.read_text(errors="replace") or "rollouts 0 |" in out.read_text(
                errors="replace").splitlines()[-1]:  # a rollout completed: the worker serves
            assert run.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        rollout = [p for p in children(run.pid) if "rollout" in _cmdline(p)]
        assert len(rollout) == 1, [_cmdline(p) for p in children(run.pid)]
        os.kill(rollout[0], signal.SIGSTOP)
        frozen.append(rollout[0])
        rc = run.wait(300)
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if run.poll() is None:
            run.kill()
            run.wait()
    text = out.read_text(errors="replace")
    assert rc == 2, (rc, text[-3000:])
    # the frozen worker stalls serving, and admission with it (the groups in flight fill the budget): both are named
    assert "| STALLED: no " in text, text[-3000:]
    error = next(line for line in text.splitlines() if line.startswith("error: the run stalled: "))
    assert "no rollout completed for" in error, error
    (report,) = home.glob("runs/*/report")
    summary = json.loads((report / "summary.json").read_text())
    assert summary["failed"].startswith("the run stalled: no "), summary.get("failed")
    assert any(s.startswith("no rollout completed for") for s in summary["health"]["stalls"]), summary["health"]
    assert "**RUN FAILED**: the run stalled" in (report / "summary.md").read_text()
