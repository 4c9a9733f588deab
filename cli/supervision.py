"""The supervision of `streamgrpo run`'s children: start, restart with backoff, never restart a misconfigured one.

A child that dies is restarted after 1, 2, 4 ... s (capped at 30 s; back to 1 s after a stable run, as
systemd's and kubelet's do). A child that exits with :data:`~streamgrpo.errors.EXIT_MISCONFIGURED` (a
ConfigError: a missing setting or system package) is not restarted: starting it again cannot help, and the
supervisor says so with the child's own error line. Children run in their own sessions and die with the
supervisor (:mod:`streamgrpo.supervisor`).

The embedded broker is not a child that can be restarted: it keeps the run's events in memory, so a new one
would start empty. :func:`broker_death` says when it died (and reaps it); the run then fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from streamgrpo.config import SUPERVISOR_PID_ENV
from streamgrpo.errors import EXIT_MISCONFIGURED


@dataclass
class Child:
    """One supervised process."""

    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0
    started: float = 0.0  # time.monotonic() of the last start
    crashes: int = 0  # consecutive deaths without a stable run in between: the backoff's exponent
    log_path: Path | None = None
    history: list[str] = field(default_factory=list)
    failed: bool = False  # exited misconfigured (EXIT_MISCONFIGURED): not restarted

    def last_error(self) -> str:
        """The last ``error: ...`` line the child printed (the CLI's one line for a StreamGRPOError), or ''."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines() if self.log_path else []
        except OSError:
            return ""
        return next((ln.removeprefix("error: ") for ln in reversed(lines) if ln.startswith("error: ")), "")

    def start(self, env: dict[str, str], log_dir: Path) -> None:
        if self.alive():  # started ahead of the others (the vLLM server)
            return
        self.log_path = log_dir / f"{self.name}.log"
        fh = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
        env = {**env, SUPERVISOR_PID_ENV: str(os.getpid())}  # the child is killed with us (streamgrpo.supervisor)
        self.proc = subprocess.Popen(self.argv, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        fh.close()
        self.started = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def broker_death(proc: subprocess.Popen[bytes] | None, log_path: Path) -> str | None:
    """Why the run's embedded broker process ``proc`` is gone, or None while it runs (or when the run uses a
    broker it did not start: ``proc`` None). Polling reaps the dead process."""
    if proc is None or proc.poll() is None:
        return None
    return (f"the embedded broker (pid {proc.pid}) exited with code {proc.returncode}: the run's events were in "
            f"its memory and are lost (log {log_path})")


def restart_delay(restarts: int) -> float:
    """Backoff before the n-th consecutive restart: 1, 2, 4 ... capped at 30 s (never a tight crash loop)."""
    return float(min(30, 2 ** max(0, restarts - 1)))


#: A child that ran this long before it died was healthy: its backoff starts again at 1 s (as systemd's and
#: kubelet's do), so a service killed now and then over hours is not kept down 30 s each time.
STABLE_S = 60.0


class Supervisor:
    """Starts children, restarts the ones that die, stops them all."""

    def __init__(self, children: list[Child], env: dict[str, str], log_dir: Path, echo: Any = click.echo,
                 stable_s: float = STABLE_S):
        self.children = children
        self.stable_s = stable_s
        self.env = env
        self.log_dir = log_dir
        self.echo = echo

    def start_all(self) -> None:
        for c in self.children:
            c.start(self.env, self.log_dir)

    @property
    def misconfigured(self) -> list[Child]:
        """Children that exited "misconfigured, do not restart" (:data:`EXIT_MISCONFIGURED`); never restarted."""
        return [c for c in self.children if c.failed]

    def check(self) -> list[str]:
        """Restart dead children (after their backoff), except those that exited misconfigured. Returns
        messages for the progress display."""
        messages = []
        now = time.monotonic()
        for c in self.children:
            if c.alive() or c.proc is None or c.failed:
                continue
            if c.proc.returncode == EXIT_MISCONFIGURED:
                c.failed = True
                msg = (f"{c.name} cannot start: {c.last_error() or 'misconfigured'} -- not restarting it "
                       f"(exit {EXIT_MISCONFIGURED}: a setting or a system package is missing; log {c.log_path})")
                c.history.append(msg)
                messages.append(msg)
            elif c.next_start == 0.0:
                c.restarts += 1
                c.crashes = 1 if now - c.started >= self.stable_s else c.crashes + 1
                delay = restart_delay(c.crashes)
                c.next_start = now + delay
                msg = (f"{c.name} exited with code {c.proc.returncode}; restarting in "
                       f"{delay:.0f}s (restart #{c.restarts}, log {c.log_path})")
                c.history.append(msg)
                messages.append(msg)
            elif now >= c.next_start:
                c.next_start = 0.0
                c.start(self.env, self.log_dir)
                messages.append(f"{c.name} restarted")
        return messages

    def stop_all(self, grace_s: float = 20.0) -> None:
        for c in reversed(self.children):  # trainer first, streams last
            c.stop(grace_s)
