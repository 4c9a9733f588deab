"""The OS boundary of the python sandbox: a bubblewrap (``bwrap``) jail, planned once and verified.

:func:`plan_jail` resolves everything a call needs (the ``bwrap`` binary, the unprivileged uid, an
interpreter that uid can read) and :func:`verify_jail` runs one probe through the real jail and
checks, from outside and from inside, that every isolation took effect. Either raises
:class:`~streamgrpo.sandbox.errors.SandboxUnavailableError`, naming what is missing and how to
grant it; the tool then refuses to start (fail closed, nothing is skipped silently).

What every call gets (:func:`bwrap_argv`):

- **identity**: an unprivileged uid always. A root worker starts ``bwrap`` as ``run_as_uid``
  (default 65534, via ``Popen(user=..., group=..., extra_groups=[])``); a non-root worker's sandbox
  runs as the worker's own uid. Inside a fresh user namespace with no capabilities; further user
  namespaces disabled (``--disable-userns``); no-new-privileges (set by bwrap, checked by the probe);
- **namespaces**: user, pid, network (only a loopback interface), ipc, uts, cgroup, mount;
- **filesystem**: an empty root, read-only; ``/usr`` and the interpreter's installation read-only;
  a minimal read-only ``/dev``; no ``/proc``, no ``/sys``, no ``/etc`` but ``/etc/alternatives`` (symlinks
  into ``/usr``), no host home or project;
  the only writable place is ``/tmp``, a tmpfs of ``disk_mb`` (the total disk quota), which is also
  the working directory and vanishes with the call; the program and the bootstrap are read-only
  copies under ``/sandbox``;
- **processes**: bwrap's init is pid 1 of the namespace; when the program exits, or bwrap is
  killed (``--die-with-parent``), the kernel kills every process left in it (setsid'd or not);
- **syscalls**: the seccomp filter of :mod:`.seccomp` (a deny list, and argument filters: no fork
  unless ``allow_fork``, no socket family but AF_UNIX and netlink route, no memfd or SysV IPC);
- **environment**: cleared; PATH, LANG, LC_ALL, HOME=TMPDIR=/tmp only, and GLIBC_TUNABLES
  (:data:`GLIBC_TUNABLES`): ``memory_mb`` is RLIMIT_AS, address space, and glibc reserves address space
  a program never uses: 64 MiB per extra malloc arena (one per concurrent thread, up to 8 per core) and
  up to 40 MiB of exited threads' stacks it keeps for reuse. How much depends on how the threads
  happened to overlap, so a program that fits on one machine failed on another (8 threads, then an
  80 MiB buffer under ``memory_mb=128``). One arena and no stack cache make ``memory_mb`` count what
  the program holds, but for the stacks of threads that exited together, which glibc unmaps only when
  another thread starts or exits: new Python threads get 3 MiB stacks, not 8
  (``_sandbox_child.THREAD_STACK_BYTES``), so 8 of them leave at most 24 MiB (threads a C library starts itself,
  e.g. a BLAS pool, keep glibc's default).

The probe (:func:`check_probe`, :func:`check_userns_probe`) checks each of these from inside: the
identity, no-new-privs, no capabilities, the seccomp filter's effects (fork, socket families, memfd,
SysV IPC, mq_open refused), the tmpfs's size, the rlimits, and, in a second run whose filter leaves
``clone`` open, that ``clone(CLONE_NEWUSER)`` fails (``unshare`` is always denied by seccomp, so it
cannot tell whether ``--disable-userns`` took effect); from outside, that each namespace differs.

What is NOT covered: kernel vulnerabilities reachable through the allowed syscalls; the tmpfs's
inode count (bwrap sets only its size: the worker counts the files from outside, see
:mod:`.sandbox_limits`, which also says which limits hold for the whole call and which per
process); side channels. The pod/host
requirements are listed in :data:`GRANT_HINT`.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from streamgrpo.sandbox._sandbox_child import THREAD_STACK_BYTES, rlimit_values
from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.errors import SandboxUnavailableError
from streamgrpo.sandbox.sandbox_cgroup import CgroupPlan
from streamgrpo.sandbox.seccomp import SeccompUnsupportedError, build_program

log = logging.getLogger(__name__)

WORKDIR = "/tmp"
BOOTSTRAP_PATH = "/sandbox/bootstrap.py"
CODE_PATH = "/sandbox/main.py"
SYSTEM_PYTHON = "/usr/bin/python3"
MIN_BWRAP = (0, 8, 0)
#: Namespaces the probe checks to differ from the worker's (bwrap reports their inode numbers).
NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "uts")
GRANT_HINT = (
    "The python sandbox needs bubblewrap (Debian: `apt-get install bubblewrap`; `make setup` installs it as root) "
    "and unprivileged user namespaces: sysctl user.max_user_namespaces > 0 (and kernel.unprivileged_userns_clone=1 / "
    "kernel.apparmor_restrict_unprivileged_userns=0 where those exist). In a container the runtime's default seccomp "
    "and AppArmor profiles block the unshare/clone/mount/pivot_root calls bwrap makes: run the pod with a seccomp "
    "profile that allows them (or Unconfined) and an AppArmor profile that allows mount (or Unconfined); no "
    "capabilities are needed. Or run the python tool in a separate pod/sidecar that has them."
)


@dataclass(frozen=True)
class JailPlan:
    """Everything a sandbox call needs, resolved once."""

    bwrap: str
    uid: int
    gid: int
    switch_user: bool  # the worker is root: start bwrap as (uid, gid)
    python: str
    python_dirs: tuple[str, ...]  # read-only binds besides /usr (at the same paths)
    seccomp: bytes
    cgroup: CgroupPlan | None = None  # a cgroup v2 per call (set by prepare_jail once verified)
    #: bwrap's ``--disable-userns`` (it writes /proc/sys/user/max_user_namespaces in the jail's user namespace):
    #: False where /proc/sys is read-only (:func:`proc_sys_read_only`, every unprivileged container), where the
    #: seccomp filter alone refuses new namespaces (``seccomp`` point 5; the probe checks it)
    disable_userns: bool = True


def _host_dirs() -> list[tuple[str, str | None]]:
    """/usr, the top-level library dirs and ``/etc/alternatives`` (Debian's library symlinks: libblas.so.3, which
    numpy loads, points through it): (path, symlink target or None to bind)."""
    out: list[tuple[str, str | None]] = [("/usr", None)]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/alternatives"):
        if os.path.islink(top):
            out.append((top, os.readlink(top)))
        elif os.path.isdir(top):
            out.append((top, None))
    return out


def host_dirs() -> list[tuple[str, str | None]]:
    """What every jail gets from the host, read-only: see :func:`_host_dirs`."""
    return _host_dirs()


def traversable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` (no supplementary groups) can reach ``path`` and read it."""
    if uid == os.geteuid():
        return os.access(path, os.R_OK)
    parts = Path(os.path.realpath(path))
    for i, p in enumerate([*reversed(parts.parents), parts]):
        try:
            st = os.stat(p)
        except OSError:
            return False
        shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        need = stat.S_IXOTH if i < len(parts.parents) else stat.S_IROTH | stat.S_IXOTH  # dirs: search; end: r+x
        if (st.st_mode >> shift) & need != need:
            return False
    return True


def interpreter_dirs(python: str) -> tuple[str, ...]:
    """The directories an interpreter needs (its prefixes and binary's folder), outside /usr."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        code = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]))"
        try:
            out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=30, check=True)  # noqa: S603
            found = json.loads(out.stdout)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            raise SandboxUnavailableError(f"the sandbox interpreter {python} does not run: {exc}") from exc
    found += [os.path.dirname(python), os.path.dirname(os.path.realpath(python))]
    dirs = sorted({os.path.realpath(d) for d in found if d})
    outside = [d for d in dirs if not (d == "/usr" or d.startswith("/usr/"))]
    return tuple(d for d in outside if not any(d.startswith(o + "/") for o in outside if o != d))


def _identity(settings: SandboxSettings) -> tuple[int, int, bool]:
    if os.geteuid() == 0:
        return settings.run_as_uid, settings.run_as_uid, True
    return os.getuid(), os.getgid(), False


def _choose_python(settings: SandboxSettings, uid: int, gid: int) -> tuple[str, tuple[str, ...]]:
    """The configured interpreter, or the worker's own when ``uid`` can read it, else /usr/bin/python3."""
    candidates = [str(settings.python)] if settings.python else [sys.executable, SYSTEM_PYTHON]
    reasons = []
    for python in candidates:
        if not os.path.exists(python):
            reasons.append(f"{python} does not exist")
            continue
        dirs = interpreter_dirs(python)
        unreadable = [d for d in (python, *dirs) if not traversable(d, uid, gid)]
        if not unreadable:
            return python, dirs
        reasons.append(f"{python}: uid {uid} cannot read {', '.join(unreadable)}")
    raise SandboxUnavailableError(
        "no python interpreter the sandbox user can read (" + "; ".join(reasons) + "). Install Debian's python3 "
        "(`apt-get install python3 python3-sympy python3-numpy`; `make setup` does it as root) or set "
        "[rollout.tools.sandbox] python to an interpreter under world-readable directories.")


def bwrap_version(bwrap: str) -> tuple[int, ...]:
    """``bwrap --version`` as a tuple (``bubblewrap 0.8.0`` -> (0, 8, 0)); () when unreadable."""
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout  # noqa: S603
    except (OSError, subprocess.SubprocessError):
        return ()
    digits = out.split()[-1].split(".") if out.split() else []
    return tuple(int(d) for d in digits if d.isdigit())


def proc_sys_read_only(mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether ``/proc/sys`` is mounted read-only here (Kubernetes, podman and docker mount it so in every
    unprivileged container): bwrap's ``--disable-userns`` then fails with EROFS."""
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) > 5 and fields[4] in ("/proc/sys", "/proc/sys/user") and "ro" in fields[5].split(","):
            return True
    return False


def plan_jail(settings: SandboxSettings) -> JailPlan:
    """Resolve the jail for ``settings``; raises SandboxUnavailableError naming what is missing."""
    bwrap = shutil.which(settings.bwrap)
    if bwrap is None:
        raise SandboxUnavailableError(f"bubblewrap ({settings.bwrap!r}) is not installed. {GRANT_HINT}")
    version = bwrap_version(bwrap)
    if version < MIN_BWRAP:
        found = ".".join(map(str, version)) or "an unreadable version"
        raise SandboxUnavailableError(
            f"bubblewrap {'.'.join(map(str, MIN_BWRAP))} or newer is needed (--size, --disable-userns); {bwrap} is "
            f"{found}. Debian 12 and Ubuntu 24.04 ship one that is new enough.")
    uid, gid, switch = _identity(settings)
    if uid == 0:
        raise SandboxUnavailableError("the sandbox would run as uid 0; run the worker as a non-root user or as root "
                                      "with [rollout.tools.sandbox] run_as_uid set to an unprivileged uid")
    python, dirs = _choose_python(settings, uid, gid)
    try:
        program = build_program(allow_fork=settings.allow_fork)
    except SeccompUnsupportedError as exc:
        raise SandboxUnavailableError(f"the sandbox's seccomp filter cannot be applied: {exc}") from exc
    disable_userns = not proc_sys_read_only()
    if not disable_userns:
        log.warning("sandbox: /proc/sys is read-only here (a container), so bwrap's --disable-userns cannot be "
                    "applied; new namespaces inside the jail are refused by its seccomp filter alone (clone with a "
                    "namespace flag, unshare, setns and clone3 are denied; the probe checks it before any call)")
    return JailPlan(bwrap=bwrap, uid=uid, gid=gid, switch_user=switch, python=python, python_dirs=dirs,
                    seccomp=program, disable_userns=disable_userns)


@dataclass(frozen=True)
class JailFds:
    """Descriptors bwrap reads at start (memfds); their numbers are kept in the child."""

    bootstrap: int
    code: int
    seccomp: int
    status: int | None = None  # --json-status-fd (the probe, and calls with a cgroup)
    block: int | None = None  # --block-fd: the jail waits until its processes are in the call's cgroup

    def all(self) -> list[int]:
        """Every descriptor to pass to bwrap."""
        return [fd for fd in (self.bootstrap, self.code, self.seccomp, self.status, self.block) if fd is not None]


def memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start (close-on-exec)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


GLIBC_TUNABLES = "glibc.malloc.arena_max=1:glibc.pthread.stack_cache_size=0"
"""glibc's tunables inside the jail: see the module docstring (environment)."""


def bwrap_argv(plan: JailPlan, settings: SandboxSettings, fds: JailFds, child_config: str) -> list[str]:
    """The whole command line of one sandboxed run (see the module docstring for what it sets up)."""
    argv = [plan.bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup", *(["--disable-userns"] if plan.disable_userns else []), "--die-with-parent",
            "--new-session", "--hostname", "sandbox",
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
            "--setenv", "LC_ALL", "C.UTF-8", "--setenv", "HOME", WORKDIR, "--setenv", "TMPDIR", WORKDIR,
            "--setenv", "GLIBC_TUNABLES", GLIBC_TUNABLES]
    for path, target in _host_dirs():
        argv += ["--symlink", target, path] if target is not None else ["--ro-bind", path, path]
    for path in plan.python_dirs:
        argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--size", str(settings.disk_mb * 1024 * 1024), "--tmpfs", WORKDIR,
             "--perms", "0444", "--ro-bind-data", str(fds.bootstrap), BOOTSTRAP_PATH,
             "--perms", "0444", "--ro-bind-data", str(fds.code), CODE_PATH,
             "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORKDIR, "--seccomp", str(fds.seccomp)]
    if fds.status is not None:
        argv += ["--json-status-fd", str(fds.status)]
    if fds.block is not None:
        argv += ["--block-fd", str(fds.block)]
    return [*argv, "--", plan.python, "-I", "-B", BOOTSTRAP_PATH, child_config]


def popen_identity(plan: JailPlan) -> dict[str, object]:
    """Keyword arguments of Popen that start bwrap as the sandbox user (done by the C fork helper,
    safe in a threaded worker, unlike preexec_fn)."""
    if not plan.switch_user:
        return {}
    return {"user": plan.uid, "group": plan.gid, "extra_groups": []}


def explain_bwrap_failure(stderr: str) -> str:
    """Turn bwrap's own error line into a message that says how to grant what is missing."""
    line = next((ln for ln in stderr.splitlines() if ln.startswith("bwrap:")), stderr.strip()[:300])
    return f"bubblewrap could not set up the sandbox ({line}). {GRANT_HINT}"


def _expected_report(plan: JailPlan, settings: SandboxSettings) -> dict[str, object]:
    """What the probe must find inside a complete jail (see ``_sandbox_child.probe``)."""
    cfg = {"cpu_seconds": settings.cpu_seconds, "memory_mb": settings.memory_mb, "file_size_mb": settings.file_size_mb,
           "max_open_files": settings.max_open_files, "max_processes": settings.max_processes}
    return {"uid": plan.uid, "euid": plan.uid, "gid": plan.gid, "groups": [], "no_new_privs": 1, "seccomp_mode": 2,
            "capabilities": 0, "interfaces": ["lo"], "root_writable": False, "proc_visible": False,
            "fork_errno": 0 if settings.allow_fork else errno.EPERM, "families_open": [], "memfd_errno": errno.EPERM,
            "ipc_errnos": dict.fromkeys(("shmget", "msgget", "semget", "mq_open"), errno.EPERM),
            "tmpfs_bytes": settings.disk_mb * 1024 * 1024,
            "rlimits": {k: list(v) for k, v in rlimit_values(cfg).items()}, "thread_stack": THREAD_STACK_BYTES}


def check_probe(report: dict[str, object], status: Sequence[dict[str, object]], plan: JailPlan,
                settings: SandboxSettings) -> list[str]:
    """What the probe found missing (empty when the jail is complete). ``report`` comes from inside
    the jail (see ``_sandbox_child.probe``), ``status`` from bwrap's --json-status-fd."""
    problems = []
    for key, want in _expected_report(plan, settings).items():
        if report.get(key) != want:
            problems.append(f"{key} is {report.get(key)!r}, expected {want!r}")
    ids = next((doc for doc in status if "child-pid" in doc), {})
    for ns in NAMESPACES:
        ours = os.stat(f"/proc/self/ns/{ns}").st_ino
        theirs = ids.get(f"{ns}-namespace")
        if theirs is None or theirs == ours:
            problems.append(f"the {ns} namespace is not separate (bwrap reported {theirs!r}, ours is {ours})")
    return problems


def check_userns_probe(report: dict[str, object]) -> list[str]:
    """The userns probe (``_sandbox_child.probe_userns``) must have failed to create a user namespace."""
    if report.get("userns_errno") in (None, 0):
        return ["a new user namespace can be created inside the jail (neither bwrap's --disable-userns nor the seccomp "
                "filter's clone rule took effect): "
                f"userns_errno is {report.get('userns_errno')!r}"]
    return []
