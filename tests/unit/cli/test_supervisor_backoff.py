"""`run`'s supervisor restarts a dead child with a backoff that grows while it keeps crashing and starts
again at 1 s once it had run stably (real child processes)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from streamgrpo.cli.supervision import Child, Supervisor, restart_delay


def _delays(runs_s: float, stable_s: float, deaths: int, tmp_path: Path) -> list[str]:
    """Let a child that lives ``runs_s`` seconds die ``deaths`` times; the supervisor's "restarting in" messages."""
    child = Child("svc", [sys.executable, "-c", f"import time, sys; time.sleep({runs_s}); sys.exit(3)"])
    sup = Supervisor([child], env={}, log_dir=tmp_path, echo=lambda *_: None, stable_s=stable_s)
    sup.start_all()
    said: list[str] = []
    deadline = time.monotonic() + 60
    while len(said) < deaths and time.monotonic() < deadline:
        said += [m.split("restarting in ")[1].split("s ")[0] for m in sup.check() if "restarting in" in m]
        time.sleep(0.05)
    sup.stop_all(grace_s=1)
    assert child.restarts == len(said) == deaths
    return said


def test_the_backoff_grows_while_a_child_keeps_crashing(tmp_path: Path) -> None:
    assert _delays(0.0, stable_s=30.0, deaths=3, tmp_path=tmp_path) == ["1", "2", "4"]


def test_the_backoff_starts_again_after_a_stable_run(tmp_path: Path) -> None:
    assert _delays(0.6, stable_s=0.5, deaths=3, tmp_path=tmp_path) == ["1", "1", "1"]


def test_the_delay_is_capped() -> None:
    assert [restart_delay(n) for n in (1, 2, 3, 5, 6, 7, 50)] == [1, 2, 4, 16, 30, 30, 30]


def test_a_misconfigured_child_is_not_restarted_and_the_supervisor_says_why(tmp_path: Path) -> None:
    """Exit status 78 (EXIT_MISCONFIGURED, what `streamgrpo` exits with on a ConfigError) is permanent."""
    from streamgrpo.errors import EXIT_MISCONFIGURED

    code = f"import sys; print('error: bubblewrap is not installed (apt-get install bubblewrap)'); sys.exit({EXIT_MISCONFIGURED})"
    child = Child("rollout-0", [sys.executable, "-c", code])
    sup = Supervisor([child], env={}, log_dir=tmp_path, echo=lambda *_: None, stable_s=30.0)
    sup.start_all()
    said: list[str] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # long enough for two backoffs (1 s, 2 s) had it been restarted
        said += sup.check()
        time.sleep(0.05)
    sup.stop_all(grace_s=1)
    assert child.restarts == 0 and sup.misconfigured == [child]
    assert len(said) == 1 and "restart" not in said[0].replace("not restarting", ""), said
    assert said[0].startswith("rollout-0 cannot start: bubblewrap is not installed (apt-get install bubblewrap)")
    assert "not restarting" in said[0]
