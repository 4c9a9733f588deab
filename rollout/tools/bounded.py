"""A wall-clock and memory bound for in-process tools: a pure function evaluated in a helper process.

A thread cannot be stopped, and a signal cannot interrupt one long C-level operation (a big-integer
power holds the GIL until it returns), so the only wall-clock bound that holds for any input is a
process that can be killed. :class:`BoundedCall` keeps ONE long-lived helper per tool (started on
the first call, ``python -I -m streamgrpo.rollout.tools.bounded <module:function> <memory_mb>``),
waits (up to :data:`STARTUP_S`) for its "ready" line, then sends it one JSON line per call and
waits at most ``wall_seconds`` for the answer; on timeout the
helper is SIGKILLed and the call returns an error (the next call starts a fresh helper). The helper
limits its own address space (RLIMIT_AS, set after its imports) and exits when its stdin closes (the worker exited).

Covered: any pure ``function(str) -> str`` of an importable module; its ToolInputError becomes the
call's error. Not covered: CPU accounting across calls (the helper lives long, so no RLIMIT_CPU);
isolation from the worker's uid or filesystem (this is for trusted code on untrusted input, like
the calculator's AST walk; LLM-written code goes to the python sandbox).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import select
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

from streamgrpo.rollout.tools.errors import ToolInputError

_MAX_LINE = 1 << 20
STARTUP_S = 60.0
READY_LINE = b"ready\n"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill and reap a helper (its pid cannot be reused before the wait)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


class BoundedCall:
    """``BoundedCall("pkg.mod:fn", wall_seconds=2)("text")`` -> ``fn("text")``, in a killable helper."""

    def __init__(self, target: str, *, wall_seconds: float, memory_mb: int) -> None:
        self.target, self.wall_seconds, self.memory_mb = target, wall_seconds, memory_mb
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _helper(self) -> subprocess.Popen[bytes]:
        """The running helper; a new one is started (and waited for, up to STARTUP_S) when needed."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(  # noqa: S603 - our interpreter and our module
                [sys.executable, "-I", "-m", __name__, self.target, str(self.memory_mb)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
            )
            self._finalizer = weakref.finalize(self, _stop, self._proc)
            assert self._proc.stdout is not None
            # Its imports are not the call's time: the wall clock starts once it says it is ready.
            if self._read_line(self._proc.stdout.fileno(), time.monotonic() + STARTUP_S) != READY_LINE:
                raise OSError(f"the helper did not start within {STARTUP_S:g}s")
        return self._proc

    def _kill(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # kills and reaps the helper
        self._proc, self._finalizer = None, None

    def close(self) -> None:
        """Stop the helper (a later call starts a new one)."""
        with self._lock:
            self._kill()

    def __call__(self, arg: str) -> str:
        """The function's answer; ToolInputError with its message, or on timeout / helper failure."""
        with self._lock:
            try:
                proc = self._helper()
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(json.dumps({"arg": arg}).encode() + b"\n")
                proc.stdin.flush()
                line = self._read_line(proc.stdout.fileno(), time.monotonic() + self.wall_seconds)
            except OSError as exc:  # the helper died or could not start
                self._kill()
                raise ToolInputError(f"the tool's helper process failed ({exc}); retry") from exc
            if line is None:
                self._kill()
                raise ToolInputError(f"timed out after {self.wall_seconds:g}s; simplify the input")
            reply = json.loads(line)
        if "error" in reply:
            raise ToolInputError(str(reply["error"]))
        return str(reply["ok"])

    def _read_line(self, fd: int, deadline: float) -> bytes | None:
        buf = b""
        while b"\n" not in buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk or len(buf) > _MAX_LINE:
                raise OSError("the helper process exited" if not chunk else "the helper's answer is too long")
            buf += chunk
        return buf


def serve(target: str, memory_mb: int) -> None:
    """The helper's loop: one JSON request per stdin line, one JSON answer per stdout line."""
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    mib = 1024 * 1024  # after the import: the bound is for the calls
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * mib, memory_mb * mib))
    sys.stdout.write(READY_LINE.decode())
    sys.stdout.flush()
    for line in sys.stdin.buffer:
        arg = json.loads(line)["arg"]
        try:
            reply = {"ok": fn(arg)}
        except ToolInputError as exc:
            reply = {"error": str(exc)}
        except MemoryError:
            reply = {"error": f"out of memory (the limit is {memory_mb} MiB)"}
        except Exception as exc:  # noqa: BLE001 - a process boundary: report any failure as the call's error
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
