"""Run LLM-written Python in a separate, fresh, limited process.

Every call:

- creates an empty temporary working directory (mode 0700), writes the code there as ``main.py``
  and deletes the directory afterwards;
- starts ``sys.executable -I _sandbox_child.py <json>`` with :class:`subprocess.Popen` (a fresh
  interpreter: never ``exec`` in the worker, never a fork of it running Python), in a new session
  (its own process group), with stdin closed and a scrubbed environment (PATH, LANG, HOME and
  TMPDIR = the working directory; nothing of the worker's environment, so no secrets);
- reads stdout/stderr with a byte bound (the rest is drained and dropped, so a print loop cannot
  fill the worker's memory) until the wall-clock deadline, then kills the whole process group.

Inside the child (see ``_sandbox_child.py``), before the code runs:

- kernel limits: RLIMIT_CPU (SIGXCPU, then SIGKILL 1 s later), RLIMIT_AS (memory -> MemoryError),
  RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_NPROC, RLIMIT_CORE=0;
- ``unshare(CLONE_NEWNET)`` when permitted (root/CAP_SYS_ADMIN): an empty network namespace;
  silently skipped otherwise;
- optionally (``run_as_uid``) a drop to an unprivileged uid, which makes RLIMIT_NPROC effective
  (root ignores it) and lets file permissions protect the host. Off by default because the dev
  interpreter lives under ``/root`` (mode 0700) and would become unreadable;
- a PEP 578 audit hook denying: process creation (os.fork/system/exec*/posix_spawn/spawn*,
  subprocess.Popen, importing ``_posixsubprocess``), every ``socket.*`` event, ctypes/cffi,
  signals to other processes, rlimit changes, reads outside the working directory and the Python
  installation (e.g. ``/etc/passwd``), writes outside the working directory, replacing a
  function's ``__code__``.

What is NOT covered (be honest): an audit hook is not a security boundary. C extensions, native
libraries, and tricks that reach raw syscalls without an audit event bypass it; metadata calls
(``os.stat``) are not audited, so file *existence* outside the directory leaks; a deliberately
hostile snippet may find a way around the hook. The kernel limits hold regardless; the network
namespace holds only where ``unshare`` is permitted; without ``run_as_uid`` the child runs as the
worker's user. Production deployments must add an OS boundary: run the worker (or the sandbox
child) in a container with gVisor, nsjail or a seccomp profile, read-only root FS and no network.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgrpo.rollout.tools.base import Param, Tool, ToolExample, ToolResult, ToolSpec
from streamgrpo.rollout.tools.config import SandboxSettings

CHILD_SCRIPT = Path(__file__).with_name("_sandbox_child.py")
MAX_CODE_CHARS = 20_000
_GRACE_S = 1.0


@dataclass(frozen=True)
class SandboxRun:
    """Raw outcome of one sandboxed run. ``returncode`` < 0 is the signal that ended the child."""

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: int

    def error(self, limits: SandboxSettings) -> str | None:
        """A one-line explanation when the run failed, None when it exited 0."""
        if self.timed_out:
            return f"killed: wall-clock limit of {limits.wall_seconds:g}s exceeded"
        if self.returncode == 0:
            return None
        if self.returncode == -signal.SIGXCPU or self.returncode == -signal.SIGKILL and not self.timed_out:
            return f"killed: CPU time limit of {limits.cpu_seconds}s exceeded (signal {-self.returncode})"
        if self.returncode < 0:
            return f"killed by signal {signal.Signals(-self.returncode).name}"
        last = next((ln for ln in reversed(self.stderr.splitlines()) if ln.strip()), "")
        if last.startswith("MemoryError"):
            return f"exit status {self.returncode}: MemoryError (memory limit is {limits.memory_mb} MiB)"
        return f"exit status {self.returncode}: {last}" if last else f"exit status {self.returncode}"


def scrubbed_env(workdir: str) -> dict[str, str]:
    """The child's whole environment: nothing inherited from the worker."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}


def _child_config(workdir: str, limits: SandboxSettings) -> str:
    return json.dumps({
        "workdir": workdir, "cpu_seconds": limits.cpu_seconds, "memory_mb": limits.memory_mb,
        "file_size_mb": limits.file_size_mb, "max_open_files": limits.max_open_files,
        "max_processes": limits.max_processes, "isolate_network": limits.isolate_network,
        "run_as_uid": limits.run_as_uid if os.geteuid() == 0 else None,
    })


def _read_bounded(proc: subprocess.Popen[bytes], deadline: float, cap: int) -> tuple[bytes, bytes, bool, bool, bool]:
    """Read both pipes until EOF or ``deadline``; keep ``cap`` bytes of each. Returns
    (stdout, stderr, stdout_truncated, stderr_truncated, timed_out)."""
    assert proc.stdout is not None and proc.stderr is not None
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    cut = dict.fromkeys(bufs, False)
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timed_out:
                    break  # grace period after the kill is over; leave the rest
                timed_out = True
                _kill_group(proc)
                deadline = time.monotonic() + _GRACE_S
                continue
            for key, _ in sel.select(timeout=remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                room = cap - len(bufs[key.fd])
                bufs[key.fd] += chunk[: max(0, room)]
                cut[key.fd] = cut[key.fd] or len(chunk) > room
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), cut[out_fd], cut[err_fd], timed_out


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group. Only called while the child is not yet reaped, so its
    pid (= the group id, it is a session leader) cannot have been reused by another process."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_exited(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait until the child has exited WITHOUT reaping it (WNOWAIT); False at the deadline."""
    while True:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def run_sandboxed(code: str, limits: SandboxSettings | None = None) -> SandboxRun:
    """Run ``code`` in a fresh limited child; see the module docstring for what is enforced."""
    limits = limits or SandboxSettings()
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="streamgrpo-sbx-", dir=str(limits.tmp_root) if limits.tmp_root else None)
    try:
        Path(workdir, "main.py").write_text(code, encoding="utf-8")
        if limits.run_as_uid is not None and os.geteuid() == 0:
            for p in (workdir, os.path.join(workdir, "main.py")):
                os.chown(p, limits.run_as_uid, limits.run_as_uid)
        proc = subprocess.Popen(  # noqa: S603 - fixed argv: our interpreter and our bootstrap
            [sys.executable, "-I", str(CHILD_SCRIPT), _child_config(workdir, limits)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workdir, env=scrubbed_env(workdir), start_new_session=True, close_fds=True,
        )
        try:
            deadline = start + limits.wall_seconds
            out, err, out_cut, err_cut, timed_out = _read_bounded(proc, deadline, limits.capture_bytes)
            if not timed_out and not _wait_exited(proc, deadline):
                timed_out = True
            _kill_group(proc)  # stragglers (or the child itself on timeout); still unreaped: safe
            returncode = proc.wait()
        finally:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return SandboxRun(
        stdout=out.decode("utf-8", errors="replace"), stderr=err.decode("utf-8", errors="replace"),
        returncode=returncode, timed_out=timed_out, stdout_truncated=out_cut, stderr_truncated=err_cut,
        duration_ms=int((time.monotonic() - start) * 1000),
    )


def format_run(run: SandboxRun) -> str:
    """What the agent reads: stdout, then stderr under a marker when there is any."""
    text = run.stdout
    if run.stderr.strip():
        text = (text + ("\n" if text and not text.endswith("\n") else "")) + "[stderr]\n" + run.stderr
    return text


class PythonSandbox(Tool):
    """``{"code": "print(2+2)"}`` -> ``"4"``: runs the code in a fresh limited process."""

    def __init__(self, limits: SandboxSettings | None = None, *, max_output_chars: int = 2000) -> None:
        super().__init__(max_output_chars=max_output_chars)
        self.limits = limits or SandboxSettings()
        self.spec = ToolSpec(
            name="python",
            description="Runs a short Python 3 program in a fresh isolated process and returns what it prints "
            "(stdout, then stderr). Use print() to see results. The standard library (math, fractions, itertools, "
            "statistics...) and installed packages such as sympy can be imported.",
            params=(Param("code", "string", "A complete Python program; print the values you need."),),
            limits=f"{self.limits.cpu_seconds}s CPU, {self.limits.wall_seconds:g}s wall, {self.limits.memory_mb} MiB "
            "memory; no network, no subprocesses, files only in its own temporary directory.",
            examples=(ToolExample({"code": "print(sum(i * i for i in range(1, 11)))"}, "385"),),
        )

    def _call(self, args: dict[str, Any]) -> ToolResult:
        code = args["code"]
        if not code.strip():
            return ToolResult(output="", error="empty program; send Python code that prints its result")
        if len(code) > MAX_CODE_CHARS:
            return ToolResult(output="", error=f"program longer than {MAX_CODE_CHARS} characters")
        try:
            run = run_sandboxed(code, self.limits)
        except OSError as exc:  # the host could not start the child (fork limit, disk full, ...)
            return ToolResult(output="", error=f"the sandbox could not start: {exc}; retry later")
        error = run.error(self.limits)
        if error is None and not run.stdout.strip() and not run.stderr.strip():
            return ToolResult(output="(no output; use print() to show results)")
        return ToolResult(output=format_run(run), error=error,
                          truncated=run.stdout_truncated or run.stderr_truncated)
