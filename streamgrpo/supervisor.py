"""Supervised processes die with their supervisor (``streamgrpo run``), even when it is SIGKILLed."""

from __future__ import annotations

import os
import sys

from streamgrpo.config import SUPERVISOR_PID_ENV

__all__ = ["SUPERVISOR_PID_ENV", "die_with_supervisor"]


def die_with_supervisor() -> None:
    """A service started by `streamgrpo run` (which sets STREAMGRPO_SUPERVISOR_PID) is killed when its
    supervisor dies, even by SIGKILL (Linux PR_SET_PDEATHSIG), instead of running on orphaned. SIGKILL, not
    SIGTERM: a graceful stop can wait forever on a broker that died with the supervisor, and every service is
    crash-safe (offsets are committed only after their effects; the chaos campaign kills them the same way).
    The variable is removed so that processes this one starts do not inherit it; elsewhere (no variable, not
    Linux) a no-op."""
    pid = os.environ.pop(SUPERVISOR_PID_ENV, None)
    if not pid or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
            return
    except (OSError, AttributeError, ValueError):
        return
    if str(os.getppid()) != pid:  # the supervisor died before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)
