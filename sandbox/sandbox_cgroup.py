"""A cgroup v2 per sandbox call, where the host delegates one: memory, pids and CPU for the whole call.

Detected once at start (:func:`plan_cgroup`): the parent is ``[tools.sandbox] cgroup_parent`` or,
unset, the worker's own cgroup (``0::<path>`` of /proc/self/cgroup under the cgroup2 mount of
/proc/self/mountinfo). It is usable when it is a writable cgroup2 directory whose
``cgroup.controllers`` has ``memory`` and ``pids`` (and ``cpu`` with ``allow_fork``) and whose
``cgroup.subtree_control`` has them or accepts them (the kernel refuses while the parent itself
holds processes: cgroup v2's "no internal processes" rule, so a worker normally points
``cgroup_parent`` at an empty delegated cgroup, e.g. systemd's ``Delegate=yes`` unit with the worker
in a leaf of it). Otherwise the reason is returned and the limits stay as :mod:`.sandbox_limits`
states them (per process where they are; said loudly at start).

Each call (:class:`CallCgroup`, documented kernel interface, Documentation/admin-guide/cgroup-v2.rst):

1. ``mkdir <parent>/sbx-<pid>-<random>``; write ``memory.max`` (memory_mb + disk_mb, since the
   tmpfs's pages and its inodes are charged to the cgroup, + :data:`OVERHEAD_MB` for bwrap),
   ``memory.swap.max`` = 0, ``memory.oom.group`` = 1 (an OOM kill takes the whole call),
   ``pids.max`` (max_processes + 1: bwrap's own monitor process) and, with ``allow_fork``,
   ``cpu.max`` = cpu_seconds / wall_seconds of one CPU, so the call's CPU time over its wall clock
   cannot exceed cpu_seconds whatever it forks;
2. bwrap starts with ``--block-fd``: its child (pid 1 of the jail) waits before it forks the
   program; the worker reads the child's pid from ``--json-status-fd``, writes it and bwrap's pid
   to ``cgroup.procs``, reads them back, and only then releases it, so every process of the program
   is born inside the cgroup. A failure here kills the jail before the program runs (fail closed);
3. after the call: ``memory.events``/``pids.events`` say whether a limit was hit; ``cgroup.kill``
   then ``rmdir``.

This path needs a host with a delegated cgroup v2; the machine it was written on has the memory and
pids controllers on cgroup v1 only, so only the detection and the values are tested there.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.errors import SandboxError
from streamgrpo.sandbox.sandbox_io import wait_child_pid

log = logging.getLogger(__name__)

OVERHEAD_MB = 32
_PERIOD_US = 100_000


class CgroupError(SandboxError):
    """A call's cgroup could not be made or joined (the program is not run)."""


@dataclass(frozen=True)
class CgroupPlan:
    """Where the calls' cgroups go and what each gets (file name -> value)."""

    parent: Path
    values: tuple[tuple[str, str], ...]


def cgroup2_mount(mountinfo: str) -> Path | None:
    """The mount point of the cgroup2 filesystem in /proc/self/mountinfo's text, None when none."""
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        if sep and tail.split(" ", 1)[0] == "cgroup2":
            return Path(head.split(" ")[4])
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """The cgroup v2 path (``0::<path>``) in /proc/self/cgroup's text."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def needed_controllers(settings: SandboxSettings) -> tuple[str, ...]:
    return ("memory", "pids", "cpu") if settings.allow_fork else ("memory", "pids")


def cgroup_values(settings: SandboxSettings) -> tuple[tuple[str, str], ...]:
    """The files written in each call's cgroup, in order."""
    mib = 1024 * 1024
    values = [("memory.max", str((settings.memory_mb + settings.disk_mb + OVERHEAD_MB) * mib)),
              ("memory.swap.max", "0"), ("memory.oom.group", "1"), ("pids.max", str(settings.max_processes + 1))]
    if settings.allow_fork:
        quota = max(1000, int(_PERIOD_US * settings.cpu_seconds / settings.wall_seconds))
        values.append(("cpu.max", f"{quota} {_PERIOD_US}"))
    return tuple(values)


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace")


def _parent(settings: SandboxSettings) -> Path | str:
    if settings.cgroup_parent is not None:
        return settings.cgroup_parent
    try:
        mount = cgroup2_mount(_read(Path("/proc/self/mountinfo")))
        own = own_cgroup(_read(Path("/proc/self/cgroup")))
    except OSError as exc:
        return f"/proc is unreadable ({exc})"
    if mount is None or own is None:
        return "no cgroup v2 filesystem is mounted"
    return mount / own.lstrip("/")


def plan_cgroup(settings: SandboxSettings) -> CgroupPlan | str:
    """The per-call cgroup plan, or why there is none (a sentence for the start-up WARNING)."""
    if settings.cgroup == "off":
        return 'switched off ([tools.sandbox] cgroup = "off")'
    parent = _parent(settings)
    if isinstance(parent, str):
        return parent
    need = needed_controllers(settings)
    try:
        available = _read(parent / "cgroup.controllers").split()
        enabled = _read(parent / "cgroup.subtree_control").split()
    except OSError as exc:
        return f"{parent} is not a cgroup v2 directory ({exc.strerror or exc})"
    missing = [c for c in need if c not in available]
    if missing:
        return f"the cgroup v2 at {parent} lacks the {', '.join(missing)} controller(s) (not delegated to it)"
    if not os.access(parent, os.W_OK):
        return f"{parent} is not writable by this worker (no cgroup delegated to it)"
    todo = [c for c in need if c not in enabled]
    if todo:
        try:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in todo))
        except OSError as exc:
            return (f"cannot enable {', '.join(todo)} in {parent}/cgroup.subtree_control ({exc.strerror or exc}; a "
                    "cgroup that holds processes cannot delegate controllers: point cgroup_parent at an empty one)")
    return CgroupPlan(parent=parent, values=cgroup_values(settings))


def _kill(*pids: int) -> None:
    """SIGKILL bwrap (its child dies with it: --die-with-parent) and the child itself."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class CallCgroup:
    """One call's cgroup (see the module docstring)."""

    def __init__(self, plan: CgroupPlan) -> None:
        self.path = plan.parent / f"sbx-{os.getpid()}-{uuid.uuid4().hex[:10]}"
        self.values = plan.values

    def create(self) -> None:
        try:
            self.path.mkdir()
            for name, value in self.values:
                if name == "memory.swap.max" and not (self.path / name).exists():
                    continue  # no swap accounting on this kernel: nothing to bound
                (self.path / name).write_text(value)
        except OSError as exc:
            self.remove()
            raise CgroupError(f"cannot set up the call's cgroup {self.path}: {exc}") from exc

    def enter(self, bwrap_pid: int, status_fd: int, release_fd: int, deadline: float) -> tuple[int | None, bytes]:
        """Move bwrap and its blocked child into the cgroup, check, then release the child. Returns the
        child's pid and the status bytes read (the caller parses them with the rest). On any failure the jail is killed
        BEFORE the release descriptor closes (EOF would release it too): the program never runs outside."""
        child, data = wait_child_pid(status_fd, deadline)
        try:
            if child is None:  # bwrap failed before its child (the caller reports bwrap's error) or is stuck
                _kill(bwrap_pid)
                return None, data
            try:
                for pid in (bwrap_pid, child):
                    (self.path / "cgroup.procs").write_text(str(pid))
                inside = {int(p) for p in _read(self.path / "cgroup.procs").split()}
            except (OSError, ValueError) as exc:
                _kill(bwrap_pid, child)
                raise CgroupError(f"cannot move the jail into its cgroup {self.path}: {exc}") from exc
            if not {bwrap_pid, child} <= inside:
                _kill(bwrap_pid, child)
                raise CgroupError(f"the jail's processes {bwrap_pid}, {child} are not in {self.path} ({sorted(inside)})")
            os.write(release_fd, b"x")
            return child, data
        finally:
            os.close(release_fd)

    def limit_hit(self) -> str | None:
        """Which of the cgroup's limits the call hit (read before :meth:`remove`)."""
        try:
            memory = dict(line.split() for line in _read(self.path / "memory.events").splitlines())
            pids = dict(line.split() for line in _read(self.path / "pids.events").splitlines())
        except (OSError, ValueError):
            return None
        if int(memory.get("oom_kill", "0")) > 0:
            return "memory"
        if int(pids.get("max", "0")) > 0:
            return "processes"
        return None

    def remove(self) -> None:
        """Kill what is left and remove the directory (a few tries while the kernel reaps)."""
        if not self.path.exists():
            return
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            pass  # kernels before 5.14: the pid namespace already took every process with bwrap
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
        log.warning("python sandbox: the call's cgroup %s could not be removed (still populated)", self.path)
