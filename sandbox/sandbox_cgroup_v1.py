"""A cgroup v1 per sandbox call, where no cgroup v2 is delegated but the v1 hierarchies are (issue 38, finding 17).

Hosts that still run the legacy hierarchy (these machines: ``memory``, ``pids`` and ``cpu`` mounted as cgroup v1
under /sys/fs/cgroup, the cgroup2 mount without controllers) bound a call with the v1 files instead
(Documentation/admin-guide/cgroup-v1/memory.rst, pids.rst, the CFS bandwidth of sched-bwc.rst):

- detection (:func:`plan_v1`): for each controller needed (``memory`` and ``pids``; ``cpu`` too with
  ``allow_fork``), the hierarchy that mounts it (/proc/self/mountinfo, fstype ``cgroup``) and the worker's own
  cgroup in it (/proc/self/cgroup): the parent of the calls' cgroups; it must be a writable directory;
- each call gets ``sbx-<pid>-<random>`` in every such hierarchy, with (:func:`v1_values`)
  ``memory.limit_in_bytes`` (memory_mb + disk_mb + the bwrap overhead, as on v2), ``memory.memsw.limit_in_bytes``
  the same where swap is accounted (no swap beyond it), ``pids.max`` (max_processes + 1), and with
  ``allow_fork`` ``cpu.cfs_period_us``/``cpu.cfs_quota_us`` (cpu_seconds over wall_seconds of one CPU). Every value
  is read back after it is written: a limit the kernel did not take fails the call (the program does not run);
- after the call: ``memory.oom_control``'s ``oom_kill`` and ``pids.events``' ``max`` say whether a limit was hit.

What differs from v2, and is NOT covered: v1 has no ``memory.oom.group``, so an out-of-memory kill takes the
largest process of the call, not all of them (the rest run on, inside the same limit, until they exit or hit it
again); v1 has no ``cgroup.kill`` (the jail's pid namespace already took every process when bwrap ended).
"""

from __future__ import annotations

import os
from pathlib import Path

from streamgrpo.sandbox.config import SandboxSettings

V1_FILES_OPTIONAL = frozenset({"memory.memsw.limit_in_bytes"})  # absent without swap accounting: nothing to bound
_PERIOD_US = 100_000


def v1_mounts(mountinfo: str) -> dict[str, tuple[Path, str]]:
    """controller -> (mount point, the hierarchy's root mounted there) of every cgroup v1 mount in
    /proc/self/mountinfo's text."""
    found: dict[str, tuple[Path, str]] = {}
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, options = head.split(" "), tail.split(" ")
        if not sep or len(fields) < 5 or len(options) < 3 or options[0] != "cgroup":
            continue
        for controller in options[2].split(","):
            if controller not in ("rw", "ro") and "=" not in controller:  # mount options, name=systemd
                found.setdefault(controller, (Path(fields[4]), fields[3]))
    return found


def own_v1_cgroups(proc_cgroup: str) -> dict[str, str]:
    """controller -> the worker's cgroup path in that v1 hierarchy, from /proc/self/cgroup's text."""
    found: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1]:
            for controller in parts[1].split(","):
                found[controller] = parts[2]
    return found


def v1_values(settings: SandboxSettings, overhead_mb: int) -> tuple[tuple[str, str], ...]:
    """The files written in each call's v1 cgroups, in order (a file's prefix names its controller)."""
    limit = str((settings.memory_mb + settings.disk_mb + overhead_mb) * 1024 * 1024)
    values = [("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit),
              ("pids.max", str(settings.max_processes + 1))]
    if settings.allow_fork:
        quota = max(1000, int(_PERIOD_US * settings.cpu_seconds / settings.wall_seconds))
        values += [("cpu.cfs_period_us", str(_PERIOD_US)), ("cpu.cfs_quota_us", str(quota))]
    return tuple(values)


def plan_v1(need: tuple[str, ...], mountinfo: str, proc_cgroup: str) -> dict[str, Path] | str:
    """controller -> the directory under which each call's cgroup of that controller goes; or why there is none."""
    mounts, own = v1_mounts(mountinfo), own_v1_cgroups(proc_cgroup)
    missing = [c for c in need if c not in mounts or c not in own]
    if missing:
        return f"no cgroup v1 hierarchy mounts the {', '.join(missing)} controller(s)"
    parents: dict[str, Path] = {}
    for controller in need:
        mount, root = mounts[controller]
        path = own[controller]
        rel = path[len(root):] if root != "/" and (path == root or path.startswith(root + "/")) else path
        parent = mount / rel.lstrip("/")
        if not parent.is_dir():
            return f"the worker's cgroup v1 {parent} ({controller}) is not visible here"
        if not (parent / "cgroup.procs").exists() or not os.access(parent, os.W_OK):
            return f"the cgroup v1 {parent} ({controller}) is not writable by this worker"
        parents[controller] = parent
    return parents


def v1_limit_hit(dirs: dict[str, Path]) -> str | None:
    """Which limit a call's v1 cgroups record as hit: "memory" (an OOM kill), "processes" (a refused fork)."""
    try:
        oom = dict(line.split() for line in (dirs["memory"] / "memory.oom_control").read_text().splitlines())
        pids = dict(line.split() for line in (dirs["pids"] / "pids.events").read_text().splitlines())
    except (OSError, ValueError, KeyError):
        return None
    if int(oom.get("oom_kill", "0")) > 0:
        return "memory"
    if int(pids.get("max", "0")) > 0:
        return "processes"
    return None
