"""A cgroup v2 per sandbox call, where the host delegates one: memory, pids and CPU for the whole call.

Detected once at start (:func:`plan_cgroup`): the parent is ``[rollout.tools.sandbox] cgroup_parent`` or,
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

Where no cgroup v2 is usable, ``[rollout.tools.sandbox] cgroup = "auto"`` (the default) falls back to the cgroup v1
hierarchies of :mod:`.sandbox_cgroup_v1` (memory, pids, and cpu with ``allow_fork``; the same steps, with the v1
files); ``"v2"`` and ``"v1"`` use only that version and refuse to start without it (fail closed), as does a set
``cgroup_parent`` (a v2 directory).

The v2 path needs a host with a delegated cgroup v2; the machine it was written on has the memory and
pids controllers on cgroup v1 only, so there only the detection and the values of v2 are tested, and the
v1 path is tested for real.
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
from streamgrpo.sandbox.sandbox_cgroup_v1 import V1_FILES_OPTIONAL, plan_v1, v1_limit_hit, v1_values
from streamgrpo.sandbox.sandbox_io import wait_child_pid

log = logging.getLogger(__name__)

OVERHEAD_MB = 32
_PERIOD_US = 100_000


class CgroupError(SandboxError):
    """A call's cgroup could not be made or joined (the program is not run)."""


_OPTIONAL = frozenset({"memory.swap.max", *V1_FILES_OPTIONAL})  # absent without swap accounting: nothing to bound


@dataclass(frozen=True)
class CgroupPlan:
    """Where the calls' cgroups go and what each gets (file name -> value). With ``v1`` (controller -> parent
    directory in that controller's cgroup v1 hierarchy) each call gets a cgroup in every such hierarchy and a
    file goes to the one its prefix names; ``parent`` is then the memory hierarchy's."""

    parent: Path
    values: tuple[tuple[str, str], ...]
    v1: tuple[tuple[str, Path], ...] = ()

    def describe(self) -> str:
        """Where the calls' cgroups go, for the start-up log."""
        if not self.v1:
            return str(self.parent)
        return f"{self.parent} (cgroup v1: " + ", ".join(f"{c} under {p}" for c, p in self.v1) + ")"


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


def _plan_v2(settings: SandboxSettings) -> CgroupPlan | str:
    """The per-call cgroup v2 plan, or why there is none."""
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


def _plan_v1(settings: SandboxSettings) -> CgroupPlan | str:
    """The per-call cgroup v1 plan (:mod:`.sandbox_cgroup_v1`), or why there is none."""
    try:
        found = plan_v1(needed_controllers(settings), _read(Path("/proc/self/mountinfo")),
                        _read(Path("/proc/self/cgroup")))
    except OSError as exc:
        return f"/proc is unreadable ({exc})"
    if isinstance(found, str):
        return found
    return CgroupPlan(parent=found["memory"], values=v1_values(settings, OVERHEAD_MB), v1=tuple(found.items()))


def plan_cgroup(settings: SandboxSettings) -> CgroupPlan | str:
    """The per-call cgroup plan, or why there is none (a sentence for the start-up WARNING): cgroup v2, else
    (``cgroup = "auto"`` without ``cgroup_parent``) cgroup v1."""
    if settings.cgroup == "off":
        return 'switched off ([rollout.tools.sandbox] cgroup = "off")'
    if settings.cgroup == "v1":
        return _plan_v1(settings)
    v2 = _plan_v2(settings)
    if isinstance(v2, CgroupPlan) or settings.cgroup == "v2" or settings.cgroup_parent is not None:
        return v2
    v1 = _plan_v1(settings)
    return v1 if isinstance(v1, CgroupPlan) else f"no cgroup v2 ({v2}) and no cgroup v1 ({v1})"


def _kill(*pids: int) -> None:
    """SIGKILL bwrap (its child dies with it: --die-with-parent) and the child itself."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class CallCgroup:
    """One call's cgroup (see the module docstring); with a v1 plan, one in each v1 hierarchy."""

    def __init__(self, plan: CgroupPlan) -> None:
        name = f"sbx-{os.getpid()}-{uuid.uuid4().hex[:10]}"
        self.v1 = bool(plan.v1)
        self.dirs = {c: parent / name for c, parent in plan.v1} if plan.v1 else {"": plan.parent / name}
        self.path = self.dirs.get("memory", plan.parent / name)
        self.values = plan.values

    def _file(self, name: str) -> Path:
        return (self.dirs[name.split(".", 1)[0]] if self.v1 else self.path) / name

    def _apply(self) -> None:
        for directory in self.dirs.values():
            directory.mkdir()
        for name, value in self.values:
            target = self._file(name)
            if name in _OPTIONAL and not target.exists():
                continue
            target.write_text(value)
            if self.v1 and _read(target).strip() != value:  # v1 rounds or ignores some writes: check each one
                raise CgroupError(f"{target} reads {_read(target).strip()!r} after {value!r} was written")

    def create(self) -> None:
        try:
            self._apply()
        except (OSError, CgroupError) as exc:
            self.remove()
            if isinstance(exc, CgroupError):
                raise
            raise CgroupError(f"cannot set up the call's cgroup {self.path}: {exc}") from exc

    def _join(self, pids: tuple[int, ...]) -> None:
        """Write ``pids`` to every cgroup.procs of the call and read them back (CgroupError when one is missing)."""
        for directory in self.dirs.values():
            try:
                for pid in pids:
                    (directory / "cgroup.procs").write_text(str(pid))
                inside = {int(p) for p in _read(directory / "cgroup.procs").split()}
            except (OSError, ValueError) as exc:
                raise CgroupError(f"cannot move the jail into its cgroup {directory}: {exc}") from exc
            if not set(pids) <= inside:
                raise CgroupError(f"the jail's processes {', '.join(map(str, pids))} are not in {directory} "
                                  f"({sorted(inside)})")

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
                self._join((bwrap_pid, child))
            except CgroupError as exc:
                _kill(bwrap_pid, child)
                if isinstance(exc.__cause__, ProcessLookupError):  # the jail ended on its own before it was moved:
                    return None, data  # bwrap's own error (the caller reports it) says why; nothing of it runs
                raise
            os.write(release_fd, b"x")
            return child, data
        finally:
            os.close(release_fd)

    def limit_hit(self) -> str | None:
        """Which of the cgroup's limits the call hit (read before :meth:`remove`)."""
        if self.v1:
            return v1_limit_hit(self.dirs)
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
        """Kill what is left and remove the directories (a few tries while the kernel reaps)."""
        for directory in self.dirs.values():
            if not directory.exists():
                continue
            if not self.v1:
                try:
                    (directory / "cgroup.kill").write_text("1")
                except OSError:
                    pass  # kernels before 5.14: the pid namespace already took every process with bwrap
            _rmdir(directory)


def _rmdir(directory: Path) -> None:
    for _ in range(50):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    log.warning("python sandbox: the call's cgroup %s could not be removed (still populated)", directory)
