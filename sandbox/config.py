"""Settings of the python tool's sandbox (``[rollout.tools.sandbox]``, a sub-table of :class:`~streamgrpo.rollout.tools.config.ToolsSettings`).

Example TOML::

    [rollout.tools.sandbox]
    cpu_seconds = 5
    memory_mb = 512
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from streamgrpo.config import StrictModel


class SandboxSettings(StrictModel):
    """The python sandbox: its jail and limits (see sandbox/jail.py and sandbox/runner.py for what they cover)."""

    cpu_seconds: int = Field(default=5, ge=1, le=600, description="RLIMIT_CPU: CPU seconds before SIGXCPU (SIGKILL 1 s later).")
    wall_seconds: float = Field(default=10.0, gt=0, le=900, description="Wall-clock limit; the jail and every process in it are killed.")
    memory_mb: int = Field(default=512, ge=64, le=65536, description="RLIMIT_AS: address-space limit in MiB.")
    file_size_mb: int = Field(default=16, ge=1, le=4096, description="RLIMIT_FSIZE: largest file the code may write, MiB.")
    max_open_files: int = Field(default=64, ge=16, le=4096, description="RLIMIT_NOFILE: open file descriptors.")
    max_processes: int = Field(
        default=16, ge=2, le=4096,
        description="RLIMIT_NPROC: processes and threads of the sandbox uid inside its own user namespace "
        "(bwrap's init counts as one).",
    )
    capture_bytes: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024, description="Bytes of stdout/stderr kept each; the rest is drained and dropped.")
    disk_mb: int = Field(
        default=64, ge=1, le=16384,
        description="Total disk quota: size of the tmpfs mounted at /tmp, the only writable place in the jail.",
    )
    max_files: int = Field(
        default=10_000, ge=16, le=1_000_000,
        description="Files and directories the program may have in /tmp at once (the tmpfs's inodes: each costs "
        "about 1 KiB of kernel memory that no rlimit counts, and bwrap cannot cap them). Counted from outside every "
        "50 ms; a call over it is killed.",
    )
    run_as_uid: int = Field(
        default=65534, ge=1,
        description="uid and gid the sandbox runs as when the worker runs as root (a non-root worker's sandbox runs "
        "as the worker's own uid). Never 0.",
    )
    python: Path | None = Field(
        default=None,
        description="Interpreter run inside the jail (its installation is bound read-only). Unset: the worker's own "
        "when the sandbox uid can read it, else /usr/bin/python3.",
    )
    bwrap: str = Field(default="bwrap", description="The bubblewrap binary (a name on PATH or a path).")
    audit_hook: bool = Field(
        default=True,
        description="Also install the in-process audit hook (defence in depth; the jail is the boundary, and the "
        "escape suite runs with this off to prove it).",
    )
    allow_fork: bool = Field(
        default=False,
        description="Let the program create processes. Off: seccomp denies fork/vfork/clone without CLONE_THREAD "
        "(threads still work), so the program is one process and memory_mb, cpu_seconds and max_open_files bound "
        "the whole call. On: those rlimits hold per process (each child gets a fresh allowance) unless a cgroup "
        "bounds the call; the tool says so in a WARNING at start.",
    )
    cgroup: Literal["auto", "v2", "v1", "off"] = Field(
        default="auto",
        description="A cgroup per call (memory, pids, and CPU with allow_fork): 'auto' detects at start a delegated "
        "cgroup v2 (cgroup_parent, else the worker's own cgroup), else the cgroup v1 memory and pids (and cpu) "
        "hierarchies the worker may write (its own cgroup in each), else falls back, with a WARNING, to the "
        "rlimits; 'v2' or 'v1' only that version, refusing to start without it; 'off' never uses one.",
    )
    cgroup_parent: Path | None = Field(
        default=None,
        description="A writable, empty cgroup v2 directory under which each call gets its own cgroup (e.g. a "
        "systemd Delegate=yes unit's subgroup). Unset: the worker's own cgroup, usable only when it may "
        "delegate memory and pids.",
    )
    require_call_limits: bool = Field(
        default=False,
        description="Refuse to start (fail closed) unless every limit holds for the whole call, not per process "
        "or not at all (tmpfs inodes are bounded only by a per-call cgroup's memory.max). Off: the tool starts and logs a "
        "WARNING naming each limit that does not hold for the whole call.",
    )
