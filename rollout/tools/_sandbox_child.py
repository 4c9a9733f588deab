"""Bootstrap of the Python sandbox child process (run as a script by ``python -I``; stdlib only).

It runs BEFORE the untrusted code, in the fresh child interpreter, in this order:

1. read its JSON configuration (argv[1]);
2. set the kernel resource limits (CPU, address space, file size, open files, processes, no core);
3. try to move into a new, empty network namespace (``unshare(CLONE_NEWNET)``; needs
   CAP_SYS_ADMIN, silently skipped when not permitted);
4. optionally drop to an unprivileged uid/gid (when configured and running as root);
5. install an audit hook (PEP 578) that denies process creation, sockets, ctypes/cffi, signals to
   other processes, rlimit changes, reads outside the working directory and the Python installation,
   and writes outside the working directory;
6. compile and run ``main.py`` from the working directory as ``__main__``.

Done here rather than in ``preexec_fn`` because ``preexec_fn`` is unsafe in a threaded parent
(the rollout worker runs Kafka and model threads). The audit hook is a guard rail against
accidents and naive code, NOT a security boundary: C extensions (and anything that reaches raw
syscalls) bypass it. See :mod:`streamgrpo.rollout.tools.python_sandbox` for the full statement.
"""

import json
import os
import resource
import sys
import sysconfig
import traceback
import types

CLONE_NEWNET = 0x40000000
DENY_EXACT = frozenset({
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile",
    "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
    "resource.setrlimit", "resource.prlimit", "sys.remote_exec", "webbrowser.open", "urllib.Request",
    "os.chroot", "os.setns", "os.unshare",
})
DENY_PREFIXES = ("socket.", "cffi.")
# ctypes may be imported (numpy and sympy need its types) but not used to reach native code:
# symbol lookup, calls through function pointers and raw memory access are denied; so is loading any
# library other than the process itself (``dlopen(NULL)``, done by ``import ctypes``).
DENY_CTYPES = frozenset({
    "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata", "ctypes.cdata/buffer",
    "ctypes.string_at", "ctypes.wstring_at", "ctypes.PyObj_FromPtr", "ctypes.addressof",
})
DENY_IMPORTS = frozenset({"_posixsubprocess", "_cffi_backend", "cffi"})
WRITE_EVENTS = frozenset({
    "os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.link", "os.symlink", "os.truncate",
    "os.chmod", "os.chown", "os.utime", "os.chflags", "os.lchflags", "os.lchmod", "os.mkfifo",
    "os.mknod", "os.setxattr", "os.removexattr", "shutil.rmtree", "shutil.copytree", "shutil.move",
    "os.chdir",
})
LIST_EVENTS = frozenset({"os.listdir", "os.scandir", "os.listxattr", "glob.glob", "glob.glob/2"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def set_limits(cfg):
    """Kernel-enforced limits; hard == soft except CPU (SIGXCPU at soft, SIGKILL one second later)."""
    mib = 1024 * 1024
    cpu = int(cfg["cpu_seconds"])
    limits = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (cfg["memory_mb"] * mib,) * 2),
        (resource.RLIMIT_FSIZE, (cfg["file_size_mb"] * mib,) * 2),
        (resource.RLIMIT_NOFILE, (cfg["max_open_files"],) * 2),
        (resource.RLIMIT_NPROC, (cfg["max_processes"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    for which, value in limits:
        resource.setrlimit(which, value)


def try_unshare_network():
    """Best effort: an empty network namespace (no interfaces, not even loopback up)."""
    try:
        import ctypes  # noqa: PLC0415 - only here, before the hook; removed from sys.modules below

        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.unshare(CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        ok = False
    for name in [m for m in sys.modules if m in ("ctypes", "_ctypes") or m.startswith("ctypes.")]:
        del sys.modules[name]
    return ok


def drop_privileges(uid):
    """Become ``uid`` (also as gid, no supplementary groups) when running as root."""
    if uid is None or os.geteuid() != 0:
        return False
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    return True


def _resolve(path, dir_fd_possible):
    if isinstance(path, int):
        return None  # an already-open descriptor
    path = os.fsdecode(os.fspath(path))
    if dir_fd_possible and not os.path.isabs(path):
        return "relative"
    return os.path.realpath(path)


def _inside(path, root):
    return path == root or path.startswith(root + os.sep)


def make_hook(workdir, read_roots):
    """The audit hook; closes over immutable values only."""
    workdir = os.path.realpath(workdir)
    read_roots = tuple(sorted({os.path.realpath(r) for r in read_roots if r}))
    read_files = frozenset({"/dev/null", "/dev/urandom", "/dev/random", "/dev/zero"})

    def deny(what):
        raise PermissionError(f"[sandbox] {what} is not allowed in the python sandbox")

    def check_read(path):
        if path in read_files or _inside(path, workdir) or any(_inside(path, r) for r in read_roots):
            return
        deny(f"reading {path} (outside the working directory)")

    def check_write(path):
        if not _inside(path, workdir):
            deny(f"writing {path} (outside the working directory)")

    def hook(event, args):
        if event in DENY_EXACT or event.startswith(DENY_PREFIXES):
            label = "process creation" if event in ("os.fork", "os.system", "os.exec", "os.posix_spawn",
                                                    "os.spawn", "subprocess.Popen", "os.forkpty") else event
            deny(f"{label} ({event})" if label != event else event)
        if event in DENY_CTYPES or event == "ctypes.dlopen" and args[0] is not None:
            deny(f"native code access through ctypes ({event})")
        if event == "import" and args[0] in DENY_IMPORTS:
            deny(f"importing {args[0]} (process creation, network and native calls are blocked)")
        if event == "object.__setattr__" and len(args) > 1 and any(args[0] is g for g in guarded):
            deny(f"replacing {args[1]}")
        if event == "open":
            path, mode, flags = args
            resolved = _resolve(path, mode is None)
            if resolved is None:
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                mode is None and bool(flags & _WRITE_FLAGS))
            if resolved == "relative":
                if writing or ".." in os.fsdecode(os.fspath(path)).split(os.sep):
                    deny("os.open with a relative path (use an absolute path or open())")
                return
            (check_write if writing else check_read)(resolved)
        elif event in WRITE_EVENTS:
            for a in args:
                if isinstance(a, (str, bytes)) or hasattr(a, "__fspath__"):
                    check_write(os.path.realpath(os.fsdecode(os.fspath(a))))
        elif event in LIST_EVENTS:
            target = args[0] if args else "."
            if isinstance(target, (str, bytes)) or hasattr(target, "__fspath__"):
                check_read(os.path.realpath(os.fsdecode(os.fspath(target or "."))))
        elif event == "sqlite3.connect" and args and args[0] != ":memory:":
            check_write(os.path.realpath(os.fsdecode(os.fspath(args[0]))))

    guarded = (hook, deny, check_read, check_write, _inside, _resolve, os.path.realpath)
    return hook


def python_read_roots():
    """Directories the interpreter needs to import the standard library and installed packages."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        roots.add(sysconfig.get_paths().get(key, ""))
    return roots


def _excepthook(exc_type, exc, tb):
    # Hide the bootstrap's own frames (main, the audit hook): the agent only needs its code's traceback.
    frames = [f for f in traceback.extract_tb(tb) if f.filename != __file__]
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(exc_type, exc))
    sys.stderr.write("Traceback (most recent call last):\n" + text)


def _blocked_fork_exec(*_args, **_kwargs):
    raise PermissionError("[sandbox] process creation (_posixsubprocess.fork_exec) is not allowed in the python sandbox")


def stub_posixsubprocess():
    """Let ``import subprocess`` / ``import asyncio`` succeed while the real ``fork_exec`` (which has
    no audit event) stays unreachable: a re-import of the real module is denied by the hook."""
    stub = types.ModuleType("_posixsubprocess", "blocked by the python sandbox")
    stub.fork_exec = _blocked_fork_exec
    sys.modules["_posixsubprocess"] = stub


def main():
    cfg = json.loads(sys.argv[1])
    workdir = cfg["workdir"]
    set_limits(cfg)
    if cfg.get("isolate_network", True):
        try_unshare_network()
    drop_privileges(cfg.get("run_as_uid"))
    os.chdir(workdir)
    sys.stdout.reconfigure(encoding="utf-8", errors="replace")
    sys.stderr.reconfigure(encoding="utf-8", errors="replace")
    sys.excepthook = _excepthook
    with open(os.path.join(workdir, "main.py"), encoding="utf-8") as fh:
        source = fh.read()
    code = compile(source, "main.py", "exec")
    sys.argv = ["main.py"]
    sys.path[:] = [p for p in sys.path if p and not _inside(os.path.realpath(p), os.path.realpath(workdir))]
    stub_posixsubprocess()
    sys.addaudithook(make_hook(workdir, python_read_roots()))
    namespace = {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}
    exec(code, namespace)  # noqa: S102 - the point of this process; it is the sandboxed child


if __name__ == "__main__":
    main()
