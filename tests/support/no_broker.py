"""A real service subprocess started against a closed loopback port (no broker), stopped with SIGTERM.

:func:`start_without_broker` runs ``python -m streamgrpo.cli <service>`` with a settings file whose ``[kafka]``
names a free loopback port (nothing listens) and ``outage_log_interval_s`` = 5, then ``[<service>]`` and any other
sections the caller gives; the ``STREAMGRPO_*`` variables of the test process are dropped. It lets the service
wait ``wait_s`` seconds (after its first "unreachable" line when ``ready_timeout_s`` is given: a service that loads
a model first), records whether it is still alive and its log so far, sends SIGTERM and times the exit. What the
service must do then is the caller's assertions. A service that does not exit in ``exit_timeout_s`` after SIGTERM
raises ``subprocess.TimeoutExpired``; the process is killed in every case.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from streamgrpo.topics.broker import free_port


@dataclass(frozen=True)
class Stopped:
    """How a service started without a broker behaved."""

    bootstrap: str  # the closed port its [kafka] bootstrap named
    unreachable: str  # the start of its "broker unreachable" line
    alive: bool  # still running after the wait, when SIGTERM was sent
    lines: list[str]  # its log when SIGTERM was sent
    rc: int  # its exit status after SIGTERM
    took: float  # seconds from SIGTERM to its exit
    text: str  # its whole log after the exit


def start_without_broker(service: str, tmp_path: Path, sections: str, *, wait_s: float,
                         ready_timeout_s: float | None = None, exit_timeout_s: float = 30) -> Stopped:
    """Start ``service`` with no broker, wait, SIGTERM it and time the exit (see the module docstring).
    ``sections``: the settings after ``[kafka]`` (its own ``[<service>]`` section at least)."""
    bootstrap = f"127.0.0.1:{free_port()}"
    config = tmp_path / f"{service}.toml"
    config.write_text(f'[kafka]\nbootstrap = "{bootstrap}"\noutage_log_interval_s = 5\n\n{sections}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
    env.update(STREAMGRPO_CONFIG=str(config), STREAMGRPO_HOME=str(tmp_path / "home"))
    log = tmp_path / f"{service}.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", service], env=env, stdout=sink,
                                stderr=subprocess.STDOUT)
    unreachable = f"Kafka broker {bootstrap} unreachable: "
    try:
        if ready_timeout_s is not None:
            deadline = time.monotonic() + ready_timeout_s
            while (unreachable not in log.read_text(errors="replace") and proc.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.2)
        time.sleep(wait_s)
        alive = proc.poll() is None
        lines = log.read_text(errors="replace").splitlines()
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        rc = proc.wait(exit_timeout_s)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return Stopped(bootstrap, unreachable, alive, lines, rc, took, log.read_text(errors="replace"))
