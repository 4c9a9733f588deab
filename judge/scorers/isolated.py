"""Run a pure function in a long-lived child process, under a deadline and a memory limit.

Why: math-verify (sympy under it) can spend unbounded time or memory on a short hostile answer
("9^{9^{9}}"), and its own timeout is ``signal.alarm``, which works only on the main thread, while
the judge scores in a thread pool. Here the function runs on the main thread of a "spawn" child:
- ``soft_s``: ``setitimer`` in the child stops Python-level work; :class:`DeadlineExceeded`, child kept;
- ``hard_s``: the parent kills a child that does not answer (C-level work no signal interrupts, e.g.
  a huge integer power); the next call starts a fresh one;
- ``mem_bytes``: ``RLIMIT_AS``, so a runaway allocation is a MemoryError in the child;
- ``init`` runs in a new child before it reports ready (imports), outside the deadline.
Calls are serialised by a lock; the function and arguments must be picklable (module-level).

What is not covered: parallel calls (one child per instance), non-POSIX platforms.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from streamgrpo.judge.errors import JudgeError


class DeadlineExceeded(JudgeError):
    """The isolated call ran past its soft budget or its hard deadline."""


class IsolatedCallError(JudgeError):
    """The isolated function raised, or its child process died; the message says which."""


class _SoftTimeout(BaseException):  # BaseException: libraries' ``except Exception`` do not swallow it
    """The soft budget ran out in the child."""


def _alarm(signum: int, frame: object) -> None:
    raise _SoftTimeout


def _serve(conn: Connection, fn: Callable[..., Any], init: Callable[[], Any] | None, soft_s: float | None,
           mem_bytes: int | None) -> None:
    """Child main loop: receive args, run ``fn`` under the soft budget, send ("ok"|"timeout"|"error", value)."""
    if mem_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    signal.signal(signal.SIGALRM, _alarm)
    if init is not None:
        init()
    conn.send(("ready", None))
    while True:
        try:
            args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if soft_s:
                signal.setitimer(signal.ITIMER_REAL, soft_s)
            try:
                reply: tuple[str, Any] = ("ok", fn(*args))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _SoftTimeout:
            reply = ("timeout", None)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
            reply = ("error", f"{type(exc).__name__}: {exc}"[:500])
        conn.send(reply)


class IsolatedFunction:
    """``fn(*args)`` evaluated in a child process; thread-safe; the child starts on the first call."""

    def __init__(self, fn: Callable[..., Any], *, hard_s: float, soft_s: float | None = None,
                 mem_bytes: int | None = None, init: Callable[[], Any] | None = None, start_s: float = 120) -> None:
        self.fn, self.hard_s, self.soft_s, self.mem_bytes, self.init, self.start_s = fn, hard_s, soft_s, mem_bytes, init, start_s
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Connection | None = None

    @property
    def pid(self) -> int | None:
        return getattr(self._proc, "pid", None)

    def __call__(self, *args: Any) -> Any:
        with self._lock:
            conn = self._start()
            conn.send(args)
            if not conn.poll(self.hard_s):
                self._stop()
                raise DeadlineExceeded(f"{self.fn.__name__} gave no answer in {self.hard_s} s; its process was killed")
            try:
                status, value = conn.recv()
            except (EOFError, OSError) as exc:
                code = getattr(self._proc, "exitcode", None)
                self._stop()
                raise IsolatedCallError(f"{self.fn.__name__}: its process died (exit code {code})") from exc
        if status == "timeout":
            raise DeadlineExceeded(f"{self.fn.__name__} ran past its budget of {self.soft_s} s")
        if status == "error":
            raise IsolatedCallError(f"{self.fn.__name__} failed in its process: {value}")
        return value

    def _start(self) -> Connection:
        if self._conn is None or self._proc is None or not self._proc.is_alive():
            self._stop()
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            self._proc = ctx.Process(target=_serve, args=(child, self.fn, self.init, self.soft_s, self.mem_bytes),
                                     daemon=True, name=f"isolated-{self.fn.__name__}")
            self._proc.start()
            child.close()
            self._conn = parent
            try:  # the deadline covers calls, not the child's start (imports): wait for "ready" first
                if not parent.poll(self.start_s) or parent.recv()[0] != "ready":
                    raise EOFError
            except (EOFError, OSError) as exc:
                self._stop()
                raise IsolatedCallError(f"{self.fn.__name__}: its process did not start") from exc
        return self._conn

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        """Stop the child (a later call starts a new one)."""
        with self._lock:
            self._stop()
