"""The chaos monkey's SIGTERM (tests/support/chaos.py): it measures how long a stopped service takes to exit and
calls one that outlives ``term_grace_s`` hung (then SIGKILLs it), so the chaos test's "every SIGTERMed service
exited in time" can fail. Real processes: children of this test process that look like service children (their
argv names ``streamgrpo.cli <service>``), one that exits on SIGTERM and one that ignores it."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support.chaos import ChaosMonkey, exited

OBEYS = "import time\nwhile True: time.sleep(0.05)"
IGNORES = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n" \
          "while True: time.sleep(0.05)"


def _service(code: str, name: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code, "streamgrpo.cli", name], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    if "ready" in code:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"  # the handler is in place
    return proc


def _monkey(signals: tuple[str, ...], services: tuple[str, ...]) -> ChaosMonkey:
    import os

    return ChaosMonkey(os.getpid(), duration_s=4.0, interval_s=(0.2, 0.2), services=services, min_uptime_s=0.0,
                       warmup_s=0.0, signals=signals, term_grace_s=1.5)


def _run(monkey: ChaosMonkey, procs: list[subprocess.Popen[str]]) -> None:
    try:
        monkey.start()
        monkey.join(30)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_service_that_exits_on_sigterm_is_timed_and_not_hung() -> None:
    proc = _service(OBEYS, "trainer")
    monkey = _monkey(("TERM",), ("trainer",))
    _run(monkey, [proc])
    assert [(k.service, k.signal, k.hung) for k in monkey.kills] == [("trainer", "TERM", False)]
    assert monkey.kills[0].exit_s is not None and monkey.kills[0].exit_s < 1.5
    assert proc.returncode == -15 and monkey.hung() == []


def test_a_service_that_ignores_sigterm_is_hung_then_killed() -> None:
    proc = _service(IGNORES, "judge")
    monkey = _monkey(("TERM",), ("judge",))
    started = time.monotonic()
    _run(monkey, [proc])
    assert [(k.service, k.signal, k.hung, k.exit_s) for k in monkey.kills] == [("judge", "TERM", True, None)]
    assert proc.returncode == -9, "SIGKILLed after the grace period"
    assert time.monotonic() - started >= 1.5


def test_exited_sees_a_zombie_and_a_missing_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while not exited(proc.pid) and time.monotonic() < deadline:  # exited, not reaped: a zombie
        time.sleep(0.02)
    assert exited(proc.pid) and proc.poll() == 0
    assert exited(proc.pid), "reaped: gone"
    live = subprocess.Popen([sys.executable, "-c", OBEYS])
    try:
        assert not exited(live.pid)
    finally:
        live.kill()
        live.wait()


def test_signals_other_than_kill_and_term_are_refused() -> None:
    with pytest.raises(ValueError, match="KILL and/or TERM"):
        _monkey(("HUP",), ("trainer",))
