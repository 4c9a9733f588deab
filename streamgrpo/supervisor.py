"""Supervised processes die with their supervisor (``streamgrpo run``), even when it is SIGKILLed."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from streamgrpo.config import SUPERVISOR_PID_ENV

__all__ = ["SUPERVISOR_PID_ENV", "die_with_supervisor", "killed_with_parent"]


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
    if not _arm_pdeathsig():
        return
    if str(os.getppid()) != pid:  # the supervisor died before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)


def _arm_pdeathsig() -> bool:
    """prctl(PR_SET_PDEATHSIG, SIGKILL) for the calling process; False where it cannot be armed."""
    try:
        return bool(_LIBC is not None and _LIBC.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError, ValueError):
        return False


def killed_with_parent() -> Callable[[], object] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child (a binary such as the embedded broker, which
    cannot call :func:`die_with_supervisor` itself) is SIGKILLed when the thread that started it exits, so
    call it from the main thread of a process that lives as long as the child should. The signal survives the
    exec. None where Linux's prctl is not available (pass it as is: ``preexec_fn=None`` is Popen's default)."""
    return _arm_pdeathsig if _LIBC is not None else None


def _load_libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:  # loaded here, before any fork: a preexec_fn must not dlopen in the child
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()
