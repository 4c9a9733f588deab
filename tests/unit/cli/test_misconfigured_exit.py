"""A rollout worker on a host without bubblewrap fails closed at start, with ONE error line that names the
missing package and the setting that turns the python tool off, and exits "misconfigured, do not restart"
(:data:`~streamgrpo.errors.EXIT_MISCONFIGURED`), before it loads a model. Real ``streamgrpo rollout``
processes; the default tools (the python tool is on by default) and a broker address nothing listens on (the
worker must stop before it needs one)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamgrpo.errors import EXIT_MISCONFIGURED


def _rollout(tmp_path: Path, toml: str, path_env: str | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text("[rollout]\nmetrics_port = 0\n\n" + toml)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO")}
    env.update(STREAMGRPO_HOME=str(tmp_path), STREAMGRPO_CONFIG=str(cfg))
    if path_env is not None:
        env["PATH"] = path_env
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "streamgrpo.cli", "rollout", "--bootstrap", "127.0.0.1:9"],
                          env=env, capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - t0


def _assert_one_clear_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == EXIT_MISCONFIGURED, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = errors[0]
    assert "bubblewrap" in line and "apt-get install bubblewrap" in line  # the missing package
    assert 'leave "python" out of [rollout.tools] enabled' in line  # the setting that turns the tool off


@pytest.mark.parametrize("how", ["setting", "path"])
def test_a_worker_without_bubblewrap_refuses_to_start_with_one_message(tmp_path: Path, how: str) -> None:
    if how == "setting":  # the jail's bwrap path setting points at a missing file
        proc, took = _rollout(tmp_path, '[rollout.tools.sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    else:  # bwrap is not on PATH
        empty = tmp_path / "bin"
        empty.mkdir()
        proc, took = _rollout(tmp_path, "", path_env=str(empty))
    _assert_one_clear_error(proc)
    assert took < 60, f"refused only after {took:.0f} s (a model was loaded first?)"


def test_the_off_switch_the_message_names_skips_the_sandbox() -> None:
    """Without "python" in [rollout.tools] enabled, the same host (no bubblewrap) passes the start-up check."""
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import preflight_tools
    from streamgrpo.rollout.tools.config import ToolsSettings
    from streamgrpo.sandbox.config import SandboxSettings
    from streamgrpo.sandbox.errors import SandboxUnavailableError

    missing = SandboxSettings(bwrap="/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailableError):
        preflight_tools(RolloutConfig(tools=ToolsSettings(sandbox=missing)))
    preflight_tools(RolloutConfig(tools=ToolsSettings(enabled=["calculator", "knowledge_search"], sandbox=missing)))
