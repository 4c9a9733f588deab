"""Liveness heartbeat: the worker loops touch a file; ``streamgrpo-probe live`` checks its age.

The services (rollout, judge, trainer, streams) serve no HTTP, so Kubernetes asks an exec probe
whether they are alive. A service is handed a :class:`Heartbeat` object (``Heartbeat.configured()``
in its command) and calls :meth:`Heartbeat.beat` from its MAIN loop — once per poll and once per unit
of finished work (a group, a training step) — so the file stops being touched when that loop hangs,
even while side tasks (the adapter follower, the task follower) keep polling. The CLI beats once as
it starts (before a model is loaded); a streams worker beats from a Faust timer (its event loop is
alive); a consumer paused on an undeliverable dead letter keeps beating (it is alive, and a restart
would not help).

The file is named by ``STREAMGRPO_HEARTBEAT_FILE`` (read by :func:`streamgrpo.config.heartbeat_file`;
unset: no heartbeat, nothing is written). Beats are rate-limited (one write per ``MIN_INTERVAL_S``)
and never raise: a read-only volume is logged once at WARNING and the service carries on (the probe
then reports the file as missing or stale).

What is covered: the loop-progress signal. What is not: a loop that keeps polling but makes no
progress on a poisoned record (that case is the dead-letter path's job, not liveness).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from streamgrpo import metrics
from streamgrpo.config import HEARTBEAT_ENV, heartbeat_file

log = logging.getLogger(__name__)

ENV = HEARTBEAT_ENV
MIN_INTERVAL_S = 1.0


class Heartbeat:
    """Touches ``path`` at most once per ``min_interval_s`` (monotonic clock); ``path`` None: a no-op."""

    def __init__(self, path: Path | None, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.path = path
        self.min_interval_s = min_interval_s
        self._last: float | None = None
        self._warned = False

    @classmethod
    def configured(cls) -> Heartbeat:
        """The heartbeat named by ``$STREAMGRPO_HEARTBEAT_FILE`` (disabled when unset)."""
        return cls(heartbeat_file())

    def beat(self) -> bool:
        """Touch the file (creating it and its folder); True when it was written now. Also sets the
        ``heartbeat_timestamp_seconds`` gauge of the process's metrics (a no-op when they are off)."""
        metrics.current().set(metrics.HEARTBEAT, time.time())
        if self.path is None:
            return False
        now = time.monotonic()
        if self._last is not None and now - self._last < self.min_interval_s:
            return False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(f"{time.time():.3f} pid={os.getpid()}\n")
        except OSError as exc:
            if not self._warned:
                log.warning("cannot write the heartbeat file %s (%s); the liveness probe will see no beats",
                            self.path, exc)
                self._warned = True
            return False
        self._last = now
        return True


_legacy: Heartbeat | None = None


def beat() -> bool:
    """Beat the process's configured heartbeat, for callers not yet handed a :class:`Heartbeat`
    (only ``rollout/worker.py``, owned by another change; new code takes a ``Heartbeat`` argument)."""
    global _legacy
    if _legacy is None or _legacy.path != heartbeat_file():
        _legacy = Heartbeat.configured()
    return _legacy.beat()
