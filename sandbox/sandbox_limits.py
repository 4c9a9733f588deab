"""Which of the python sandbox's limits hold for the whole call, and which only per process or not at all.

A call is every process the program starts. The jail bounds it with:

- **seccomp** (:mod:`.seccomp`): unless ``allow_fork``, no second process can exist (threads can), so
  the per-process rlimits RLIMIT_AS (``memory_mb``), RLIMIT_CPU (``cpu_seconds``) and RLIMIT_NOFILE
  (``max_open_files``) are the call's; memfd, SysV IPC and POSIX message queues, whose pages no
  rlimit counts, are denied;
- **the user namespace**: RLIMIT_NPROC (``max_processes``) counts the sandbox uid's tasks in the
  call's own, fresh user namespace, so it is the call's;
- **the tmpfs** at /tmp: its size is ``disk_mb`` for the call. bwrap sets only ``size=``, not
  ``nr_inodes``, and every file costs about 1 KiB of kernel memory (300k empty files fit in a 1 MiB
  quota), so the worker counts them from outside (``/proc/<jail pid>/root/tmp``, every 50 ms) and
  kills the call over ``max_files``: a program can overshoot by what it creates in 50 ms. Checked
  at start; where the worker cannot see the jail's /tmp, only a cgroup's memory.max counts them.

:func:`limit_scopes` says, for the settings given, where each limit holds; :func:`announce_limits`
states it once when the tool is built: a WARNING naming each limit that is not the call's, or, with
``require_call_limits``, :class:`~streamgrpo.sandbox.errors.SandboxUnavailableError` (fail
closed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.errors import SandboxUnavailableError

log = logging.getLogger(__name__)

Scope = Literal["call", "process", "none"]


@dataclass(frozen=True)
class LimitScope:
    """One limit: the setting behind it, where it holds, and by what."""

    name: str
    setting: str
    scope: Scope
    how: str

    def describe(self) -> str:
        """``memory_mb=512 (RLIMIT_AS)`` as one phrase for a log line."""
        return f"{self.name}: {self.setting} ({self.how})"


def _inodes(settings: SandboxSettings, cgroup: str | None, unwatched: str | None) -> LimitScope:
    if unwatched is None:
        also = f"; their memory also counts in the call's cgroup under {cgroup}" if cgroup else ""
        return LimitScope("disk inodes", f"max_files={settings.max_files}", "call",
                          f"counted from outside every 50 ms, the call killed over it{also}")
    if cgroup is not None:
        return LimitScope("disk inodes", f"disk_mb={settings.disk_mb}", "call",
                          f"their memory counts in the call's cgroup under {cgroup}")
    return LimitScope("disk inodes", "none", "none",
                      f"bwrap cannot cap the tmpfs's inodes, {unwatched}, and no cgroup counts their kernel memory")


def limit_scopes(settings: SandboxSettings, cgroup: str | None = None,
                 unwatched: str | None = "the file count was not checked") -> tuple[LimitScope, ...]:
    """Where each limit of ``settings`` holds; ``cgroup`` is the per-call cgroup's parent when one is used,
    ``unwatched`` why the worker cannot count the jail's files (None when it can). A pure function of what
    the start-up checks found."""
    one = not settings.allow_fork
    per: Scope = "call" if one else "process"
    why = "one process: seccomp denies fork" if one else "per process: allow_fork lets each child start afresh"
    if cgroup is not None:
        cg = f"the call's cgroup under {cgroup}"
        memory = LimitScope("memory", f"memory_mb={settings.memory_mb}", "call",
                            f"the memory limit of {cg} (memory.max, v1: memory.limit_in_bytes), with the tmpfs's pages and inodes; RLIMIT_AS per process")
        cpu = LimitScope("cpu", f"cpu_seconds={settings.cpu_seconds}", "call",
                         f"RLIMIT_CPU; {why}" if one else f"the CPU quota of {cg} (cpu.max, v1: cpu.cfs_quota_us) over the wall clock; RLIMIT_CPU per process")
        procs = f"pids.max of {cg} and RLIMIT_NPROC"  # the same file on v1 and v2
    else:
        memory = LimitScope("memory", f"memory_mb={settings.memory_mb}", per, f"RLIMIT_AS; {why}")
        cpu = LimitScope("cpu", f"cpu_seconds={settings.cpu_seconds}", per, f"RLIMIT_CPU; {why}")
        procs = "RLIMIT_NPROC in the call's own user namespace"
    return (
        memory, cpu,
        LimitScope("open files", f"max_open_files={settings.max_open_files}", per, f"RLIMIT_NOFILE; {why}"),
        LimitScope("processes and threads", f"max_processes={settings.max_processes}", "call", procs),
        LimitScope("disk bytes", f"disk_mb={settings.disk_mb}", "call", "size of the call's tmpfs"),
        _inodes(settings, cgroup, unwatched),
        LimitScope("memfd, SysV IPC, POSIX mqueue", "denied", "call", "seccomp"),
        LimitScope("wall clock", f"wall_seconds={settings.wall_seconds:g}", "call",
                   "the worker kills the jail's process group; the pid namespace takes every process"),
    )


def announce_limits(scopes: tuple[LimitScope, ...], settings: SandboxSettings, no_cgroup: str | None = None) -> None:
    """Say which limits are not the call's: a WARNING, or SandboxUnavailableError under ``require_call_limits``.
    ``no_cgroup`` is why no per-call cgroup is used (None when one is)."""
    per_process = [s for s in scopes if s.scope == "process"]
    unbounded = [s for s in scopes if s.scope == "none"]
    if not per_process and not unbounded:
        log.info("python sandbox: every limit holds for the whole call%s",
                 f" (no per-call cgroup: {no_cgroup})" if no_cgroup else "")
        return
    parts = []
    if per_process:
        parts.append("PER PROCESS ONLY, not per call (a program that forks multiplies them): "
                     + "; ".join(s.describe() for s in per_process))
    if unbounded:
        parts.append("NOT BOUNDED: " + "; ".join(s.describe() for s in unbounded))
    if no_cgroup is not None:
        parts.append(f"No per-call cgroup: {no_cgroup}")
    text = "python sandbox limits: " + ". ".join(parts)
    if settings.require_call_limits:
        raise SandboxUnavailableError(
            f"{text}. [rollout.tools.sandbox] require_call_limits is set, so the tool refuses to start; unset allow_fork "
            "for one process per call, or give each call a cgroup (cgroup_parent)")
    log.warning("%s", text)
