"""Run LLM-written Python in a fresh, jailed, limited process (never in the worker's process).

The boundary is the bubblewrap jail of :mod:`streamgrpo.sandbox.jail` (unprivileged uid,
no-new-privileges, user/pid/net/ipc/uts/cgroup/mount namespaces, an empty read-only root with
``/usr`` and the interpreter read-only, a ``disk_mb`` tmpfs as the only writable place, a seccomp
deny list, the whole process tree killed with the call). Building the tool plans the jail and runs
one probe through it that checks every isolation from inside and outside; when any is missing the
tool refuses to build (:class:`~streamgrpo.sandbox.errors.SandboxUnavailableError`, naming what
to grant). A call whose jail fails to start returns an error; the program never runs unjailed.

Every call:

- copies the bootstrap (``_sandbox_child.py``), the program and the seccomp program into memfds
  that bwrap reads (nothing is written to the host's disk);
- starts ``bwrap ... python -I -B /sandbox/bootstrap.py <config>`` with :class:`subprocess.Popen`
  as the sandbox uid (``user=``/``group=``, done by the C fork helper: safe in a threaded worker),
  in a new session, with stdin closed, an empty environment and only the memfds inherited;
- reads stdout/stderr with a byte bound (the rest is drained and dropped) until the wall-clock
  deadline, then kills bwrap's process group; bwrap's ``--die-with-parent`` and the pid namespace
  take every process of the jail with it.
- learns the jail's pid from ``--json-status-fd`` and counts the files of its /tmp from outside every
  50 ms (``max_files``; :class:`~.sandbox_io.FileWatch`); with a per-call cgroup
  (:mod:`.sandbox_cgroup`) the jail is held (``--block-fd``) until it is inside it.

Inside, before the code runs (see ``_sandbox_child.py``): kernel limits (RLIMIT_CPU, RLIMIT_AS,
RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_NPROC, RLIMIT_CORE=0) and, as defence in depth only, a PEP 578
audit hook that denies process creation, sockets, native calls through ctypes, and file access
outside the working directory and the Python installation. The escape suite
(``tests/unit/sandbox/test_tools_sandbox_escape.py``) runs every attack with the hook switched off
too: the jail alone must hold.

Which limits hold for the whole call and which only per process is decided and announced once at
start by :mod:`.sandbox_limits` (a WARNING, or a refusal under ``require_call_limits``).

What is NOT covered: see :mod:`.jail` (kernel bugs in allowed syscalls, side channels).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgrpo.sandbox._sandbox_child import READY, format_config
from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.errors import SandboxUnavailableError
from streamgrpo.sandbox.jail import (
    CODE_PATH,
    WORKDIR,
    JailFds,
    JailPlan,
    bwrap_argv,
    check_probe,
    check_userns_probe,
    explain_bwrap_failure,
    memfd,
    plan_jail,
    popen_identity,
)
from streamgrpo.sandbox.sandbox_cgroup import CallCgroup, CgroupError, plan_cgroup
from streamgrpo.sandbox.sandbox_io import (
    FileWatch,
    kill_group,
    read_bounded,
    read_status,
    wait_child_pid,
    wait_exited,
)
from streamgrpo.sandbox.sandbox_limits import announce_limits, limit_scopes
from streamgrpo.sandbox.seccomp import build_program

log = logging.getLogger(__name__)

CHILD_SCRIPT = Path(__file__).with_name("_sandbox_child.py")
PROBE_WALL_S = 60.0


@dataclass(frozen=True)
class SandboxRun:
    """Raw outcome of one sandboxed run. ``returncode`` < 0 is the signal that ended bwrap; bwrap
    reports a program killed by signal N as 128 + N. ``jail_error`` is set when the jail did not
    start (the program did not run): exactly when the bootstrap's ready marker (``_sandbox_child.READY``, written
    to stderr after the jail is up and before the program's first line runs) is missing and neither the wall clock
    nor a limit ended the run. The exit status never decides it: a program may exit with any status, 121 (the
    bootstrap's own refusal, which it makes before the marker) included."""

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: int
    jail_error: str | None = None
    limit_hit: str | None = None  # "files": the file watch killed it; "memory" / "processes": the cgroup says so

    def error(self, limits: SandboxSettings) -> str | None:
        """A one-line explanation when the run failed, None when it exited 0."""
        if self.jail_error is not None:
            return f"the sandbox could not start, the program did not run: {self.jail_error}"
        if self.timed_out:
            return f"killed: wall-clock limit of {limits.wall_seconds:g}s exceeded"
        if self.limit_hit == "files":
            return f"killed: more than {limits.max_files} files in /tmp (max_files)"
        if self.limit_hit == "memory":
            return f"killed: memory limit of {limits.memory_mb} MiB (plus {limits.disk_mb} MiB of files) exceeded"
        if self.returncode == 0:
            return None
        sig = self.returncode - 128 if self.returncode > 128 else -self.returncode if self.returncode < 0 else 0
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return f"killed: CPU time limit of {limits.cpu_seconds}s exceeded (signal {sig})"
        if sig in signal.valid_signals() and sig > 0:
            return f"killed by signal {signal.Signals(sig).name}"
        last = next((ln for ln in reversed(self.stderr.splitlines()) if ln.strip()), "")
        if last.startswith("MemoryError"):
            return f"exit status {self.returncode}: MemoryError (memory limit is {limits.memory_mb} MiB)"
        return f"exit status {self.returncode}: {last}" if last else f"exit status {self.returncode}"


def child_config(limits: SandboxSettings, *, probe: bool | str = False) -> str:
    """The bootstrap's argument (``key=value,...``, see ``_sandbox_child.format_config``)."""
    return format_config({
        "workdir": WORKDIR, "code_path": CODE_PATH, "cpu_seconds": limits.cpu_seconds, "memory_mb": limits.memory_mb,
        "file_size_mb": limits.file_size_mb, "max_open_files": limits.max_open_files,
        "max_processes": limits.max_processes, "audit_hook": limits.audit_hook, "probe": probe,
    })


def _memfds(contents: list[tuple[str, bytes]]) -> list[int]:
    """One memfd per (name, data); when one cannot be made, those already made are closed (no leak)."""
    opened: list[int] = []
    made = False
    try:
        for name, data in contents:
            opened.append(memfd(name, data))
        made = True
        return opened
    finally:
        if not made:
            for fd in opened:
                os.close(fd)


@dataclass(frozen=True)
class _Started:
    proc: subprocess.Popen[bytes]
    status_r: int
    child: int | None  # the jail's pid 1 (host pid), from bwrap's status
    early: bytes  # status bytes already read


def _start(plan: JailPlan, limits: SandboxSettings, code: str, config: str, call_cg: CallCgroup | None) -> _Started:
    """Start bwrap and learn its jail's pid; with a cgroup, hold the jail until its processes are in it."""
    opened = _memfds([("sbx-bootstrap", CHILD_SCRIPT.read_bytes()), ("sbx-code", code.encode("utf-8")),
                      ("sbx-seccomp", plan.seccomp)])
    status_r, status_w = os.pipe()
    block_r, block_w = os.pipe() if call_cg else (None, None)
    fds = JailFds(bootstrap=opened[0], code=opened[1], seccomp=opened[2], status=status_w, block=block_r)
    try:
        proc = subprocess.Popen(  # noqa: S603 - fixed argv: bwrap, our interpreter and our bootstrap
            bwrap_argv(plan, limits, fds, config), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd="/", env={}, start_new_session=True, close_fds=True, pass_fds=fds.all(),
            **popen_identity(plan),  # type: ignore[arg-type]
        )
    except OSError:
        for fd in (status_r, block_w):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in [*opened, status_w, *([block_r] if block_r is not None else [])]:
            os.close(fd)
    deadline = time.monotonic() + limits.wall_seconds
    try:
        if call_cg is not None and block_w is not None:
            child, early = call_cg.enter(proc.pid, status_r, block_w, deadline)
        else:
            child, early = wait_child_pid(status_r, deadline)
    except CgroupError:
        kill_group(proc)
        proc.wait()
        os.close(status_r)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        raise
    return _Started(proc, status_r, child, early)


def _spawn(plan: JailPlan, limits: SandboxSettings, code: str, config: str,
           with_status: bool = False) -> tuple[SandboxRun, list[dict[str, Any]]]:
    """One run of ``code`` in the jail (in a cgroup of its own when the plan has one, its files counted
    from outside); the status documents are read only when ``with_status``."""
    start = time.monotonic()
    call_cg = CallCgroup(plan.cgroup) if plan.cgroup is not None else None
    try:
        if call_cg is not None:
            call_cg.create()
        st = _start(plan, limits, code, config, call_cg)
        proc, watch = st.proc, None
        if st.child is not None:
            watch = FileWatch(st.child, WORKDIR, limits.disk_mb * 1024 * 1024, limits.max_files)
        try:
            deadline = start + limits.wall_seconds
            pipes = read_bounded(proc, deadline, limits.capture_bytes, watch)
            timed_out = pipes.timed_out or (pipes.killed_for is None and not wait_exited(proc, deadline))
            kill_group(proc)  # on timeout; otherwise a no-op (the pid namespace is already gone)
            returncode = proc.wait()
            status = read_status(st.status_r, st.early) if with_status else []
        finally:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            os.close(st.status_r)
        limit_hit = pipes.killed_for or (call_cg.limit_hit() if call_cg is not None else None)
    except CgroupError as exc:
        run = SandboxRun(stdout="", stderr="", returncode=-1, timed_out=False, stdout_truncated=False,
                         stderr_truncated=False, duration_ms=int((time.monotonic() - start) * 1000), jail_error=str(exc))
        return run, []
    finally:
        if call_cg is not None:
            call_cg.remove()
    err = pipes.err.replace(READY, b"", 1)
    jail_error = None
    if READY not in pipes.err and not timed_out and limit_hit is None:  # the program never ran (see SandboxRun)
        jail_error = explain_bwrap_failure(err.decode("utf-8", "replace"))
    run = SandboxRun(
        stdout=pipes.out.decode("utf-8", errors="replace"), stderr=err.decode("utf-8", errors="replace"),
        returncode=returncode, timed_out=timed_out, stdout_truncated=pipes.out_cut, stderr_truncated=pipes.err_cut,
        duration_ms=int((time.monotonic() - start) * 1000), jail_error=jail_error, limit_hit=limit_hit,
    )
    return run, status


def _probe_report(plan: JailPlan, limits: SandboxSettings, mode: bool | str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One probe run through the jail: its JSON report and bwrap's status documents."""
    run, status = _spawn(plan, limits, "", child_config(limits, probe=mode), with_status=True)
    if run.returncode != 0 or run.timed_out:
        raise SandboxUnavailableError(run.jail_error or explain_bwrap_failure(run.stderr or f"exit status {run.returncode}"))
    try:
        report = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise SandboxUnavailableError(f"the sandbox probe printed no report: {run.stdout[:200]!r} "
                                      f"{run.stderr[:300]!r}") from exc
    return dict(report), status


def verify_jail(plan: JailPlan, limits: SandboxSettings) -> dict[str, Any]:
    """Run the probes through the jail; raise SandboxUnavailableError listing every isolation missing.

    Two runs: the jail as every call gets it (every isolation, the seccomp argument filters, the tmpfs,
    the rlimits), and the same jail under a filter that leaves ``clone`` open, where creating a user
    namespace must still fail. Where bwrap's --disable-userns applies, that filter also leaves clone's
    namespace flags open, so the run tests --disable-userns itself; where it cannot apply (a read-only
    /proc/sys, ``plan.disable_userns`` False) the filter keeps its clone rule, so the run tests that rule,
    the one layer left. Each gets at least :data:`PROBE_WALL_S` (a busy host must not fail it)."""
    probe_limits = limits.model_copy(update={"wall_seconds": max(limits.wall_seconds, PROBE_WALL_S)})
    report, status = _probe_report(plan, probe_limits, True)
    problems = check_probe(report, status, plan, limits)
    forking = dataclasses.replace(plan, seccomp=build_program(allow_fork=True, clone_namespaces=not plan.disable_userns))
    userns, _ = _probe_report(forking, probe_limits, "userns")
    problems += check_userns_probe(userns)
    if problems:
        raise SandboxUnavailableError("the sandbox jail is incomplete, refusing to run code: " + "; ".join(problems))
    return {**report, "new_userns_blocked": True, "userns_errno": userns["userns_errno"]}


def _verify_with_cgroup(plan: JailPlan, limits: SandboxSettings) -> tuple[JailPlan, dict[str, Any], str | None]:
    """Verify the jail, in a per-call cgroup where one is delegated (the probe runs inside one). Returns
    the plan to use, the probe's report and why no cgroup is used (None when one is)."""
    cgroup = plan_cgroup(limits)
    explicit = _explicit_cgroup(limits)
    if isinstance(cgroup, str) and explicit is not None:  # asked for explicitly: fail closed
        raise SandboxUnavailableError(f"{explicit} is set but unusable: {cgroup}")
    if isinstance(cgroup, str):
        return plan, verify_jail(plan, limits), cgroup
    try:
        with_cgroup = dataclasses.replace(plan, cgroup=cgroup)
        return with_cgroup, verify_jail(with_cgroup, limits), None
    except SandboxUnavailableError as exc:
        reason = f"the per-call cgroup under {cgroup.describe()} did not work ({exc})"
    if explicit is not None:  # asked for explicitly: fail closed
        raise SandboxUnavailableError(f"{explicit}: {reason}")
    return plan, verify_jail(plan, limits), reason


def _explicit_cgroup(limits: SandboxSettings) -> str | None:
    """The setting that asks for a cgroup explicitly (the tool then refuses to start without it), if any."""
    if limits.cgroup_parent is not None:
        return "[rollout.tools.sandbox] cgroup_parent"
    if limits.cgroup in ("v1", "v2"):
        return (f'[rollout.tools.sandbox] cgroup = "{limits.cgroup}" (env STREAMGRPO_ROLLOUT__TOOLS__SANDBOX__CGROUP; '
                '"auto" falls back to the rlimits with a WARNING)')
    return None


def _file_watch_works(plan: JailPlan, limits: SandboxSettings) -> str | None:
    """None when a program making 64 files under ``max_files=16`` is killed for it; else why not."""
    trial = limits.model_copy(update={"max_files": 16, "wall_seconds": max(limits.wall_seconds, 30.0)})
    code = "for i in range(64):\n    open('/tmp/w%d' % i, 'w').close()\nimport time\ntime.sleep(5)\n"
    run, _ = _spawn(plan, trial, code, child_config(trial))
    if run.limit_hit == "files":
        return None
    return (f"the worker cannot count the jail's files through /proc/<pid>/root ({run.error(trial) or 'not killed'}: "
            "it needs a /proc where it may read its own children's roots)")


def prepare_jail(limits: SandboxSettings) -> JailPlan:
    """Plan the jail, verify it once, and state which limits hold for the whole call (the tool refuses to
    build when this raises: a missing isolation, or a per-process limit under ``require_call_limits``)."""
    plan, report, no_cgroup = _verify_with_cgroup(plan_jail(limits), limits)
    cgroup_parent = plan.cgroup.describe() if plan.cgroup is not None else None
    unwatched = _file_watch_works(plan, limits)
    announce_limits(limit_scopes(limits, cgroup_parent, unwatched), limits, no_cgroup)
    log.info("python sandbox: bubblewrap jail verified (uid %d, %s python %s, seccomp on, %d MiB disk, cgroup %s)",
             plan.uid, plan.python, report.get("python"), limits.disk_mb, cgroup_parent or "none")
    return plan


def run_sandboxed(code: str, limits: SandboxSettings | None = None, plan: JailPlan | None = None) -> SandboxRun:
    """Run ``code`` in the jail; see the module docstring for what is enforced. Without ``plan`` the
    jail is planned and verified first (a tool builds it once instead)."""
    limits = limits or SandboxSettings()
    plan = plan or prepare_jail(limits)
    run, _ = _spawn(plan, limits, code, child_config(limits))
    if run.jail_error is not None:
        from streamgrpo.log import printable

        # the error may quote the program's own stderr: one escaped, bounded line in the worker's log
        log.error("python sandbox: %s", printable(run.jail_error, keep_newlines=False, limit=400))
    return run
