"""Bootstrap of the python sandbox child (stdlib only; any Python >= 3.8).

It runs as ``python -I -B /sandbox/bootstrap.py key=value,...`` INSIDE the bubblewrap jail (see
:mod:`streamgrpo.sandbox.jail`), already as an unprivileged uid, before the untrusted code:

1. read its configuration (:func:`parse_config`; not JSON: importing ``json`` costs ~20 ms per call)
   and refuse to continue as uid 0 (exit 121): the jail must have dropped privileges;
2. probe mode (``probe=1``): report what the jail applied (uid, groups, no-new-privs, seccomp mode,
   capabilities, network interfaces, whether ``/`` is writable, whether /proc is visible, what the
   seccomp argument filters refuse: fork, socket families, memfd, SysV IPC, mq_open; the tmpfs's
   size; the rlimits once set) as one JSON line, and exit; ``probe=userns``: whether a user
   namespace can be created (run under a filter that leaves ``clone`` open);
3. set the kernel resource limits (CPU, address space, file size, open files, processes, no core);
4. write the ready marker to stderr (the parent tells a jail failure from the program's by it);
5. unless disabled, install the audit hook (PEP 578): defence in depth only, the jail is the
   boundary. Its policy is captured in closures when it is built (rewriting this module's globals
   from the sandboxed code changes nothing) and it also denies the ``gc`` calls that reach other
   objects' references;
6. run ``/sandbox/main.py`` as a fresh ``__main__`` module (``import __main__`` finds the program,
   not this bootstrap).
"""

import _thread
import os
import resource
import sys
import types

READY = b"\x00sandbox-ready\x00"
EXIT_UNSAFE = 121
DENY_EXACT = frozenset({
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile",
    "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
    "resource.setrlimit", "resource.prlimit", "sys.remote_exec", "webbrowser.open", "urllib.Request",
    "os.chroot", "os.setns", "os.unshare", "gc.get_referrers", "gc.get_referents", "gc.get_objects",
})
PROCESS_EVENTS = frozenset({"os.fork", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
                            "os.forkpty"})
DENY_PREFIXES = ("socket.", "cffi.")
# ctypes may be imported (numpy and sympy need its types) but not used to reach native code.
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


def format_config(cfg):
    """``{"a": 1, "b": True}`` -> ``"a=1,b=1"`` (values: str without ',' or '=', int, bool)."""
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


def parse_config(text):
    """The inverse of :func:`format_config`; digit strings come back as ints."""
    cfg = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        cfg[key] = int(value) if value.isdigit() else value
    return cfg


RLIMITS = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "fsize": resource.RLIMIT_FSIZE,
           "nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC, "core": resource.RLIMIT_CORE}


def rlimit_values(cfg):
    """The (soft, hard) pair of each limit; hard == soft except CPU (SIGXCPU at soft, SIGKILL 1 s later)."""
    mib = 1024 * 1024
    cpu = int(cfg["cpu_seconds"])
    return {"cpu": (cpu, cpu + 1), "as": (cfg["memory_mb"] * mib,) * 2, "fsize": (cfg["file_size_mb"] * mib,) * 2,
            "nofile": (cfg["max_open_files"],) * 2, "nproc": (cfg["max_processes"],) * 2, "core": (0, 0)}


THREAD_STACK_BYTES = 3 * 1024 * 1024
"""The stack each new thread reserves (the program may change it with ``threading.stack_size``).

``memory_mb`` is RLIMIT_AS, and glibc's default thread stack is RLIMIT_STACK, 8 MiB. A detached
thread (every Python thread) cannot unmap its own stack as it exits, and with no stack cache
(``glibc.pthread.stack_cache_size=0``) the stack is unmapped only when another thread starts or
exits; threads that exit together leave theirs mapped: 8 threads then an 80 MiB buffer under
``memory_mb=128`` failed in CI when 4 or more of the 8 MiB stacks were left. 3 MiB leaves at most
24 MiB for 8 threads. Measured need: a thread recursing to the default recursion limit through C
(``sorted`` with a key calling back) crashed at 1.5 MiB and ran at 1.75 MiB."""


def set_limits(cfg):
    """Kernel-enforced limits (see :func:`rlimit_values`), and the stack of new threads
    (:data:`THREAD_STACK_BYTES`)."""
    for name, value in rlimit_values(cfg).items():
        resource.setrlimit(RLIMITS[name], value)
    _thread.stack_size(THREAD_STACK_BYTES)


def _capabilities(libc, ctypes):
    """Effective | permitted | inheritable | bounding | ambient capability bits (0 = none at all)."""
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return -1
    bits = 0
    for i, word in enumerate(data):
        bits |= (word.effective | word.permitted | word.inheritable) << (32 * i)
    for cap in range(64):
        if libc.prctl(23, cap, 0, 0, 0) == 1:  # PR_CAPBSET_READ
            bits |= 1 << cap
        if libc.prctl(47, 1, cap, 0, 0) == 1:  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET
            bits |= 1 << cap
    return bits


def _errno_of(call):
    """0 when ``call()`` succeeds, else the OSError's errno."""
    try:
        call()
    except OSError as exc:
        return exc.errno
    return 0


def _try_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _open_families(socket):
    """Socket families (and netlink protocols) that could be opened; the jail allows none of them."""
    tries = [("vsock", 40, socket.SOCK_STREAM, 0), ("inet", 2, socket.SOCK_STREAM, 0), ("inet6", 10, socket.SOCK_DGRAM, 0),
             ("packet", 17, socket.SOCK_DGRAM, 0), ("alg", 38, socket.SOCK_SEQPACKET, 0),
             ("netlink_uevent", 16, socket.SOCK_DGRAM, 15), ("netlink_audit", 16, socket.SOCK_RAW, 9)]
    opened = []
    for name, family, kind, proto in tries:
        if _errno_of(lambda: socket.socket(family, kind, proto).close()) == 0:  # noqa: B023 - called at once
            opened.append(name)
    return opened


def _libc_errnos(libc, ctypes):
    """errno of SysV shm/msg/sem creation and of mq_open (0 = created)."""
    out = {}
    rt = libc if hasattr(libc, "mq_open") else ctypes.CDLL("librt.so.1", use_errno=True)  # glibc < 2.34: librt
    for name, call in [("shmget", lambda: libc.shmget(0, 1 << 20, 0o1600)), ("msgget", lambda: libc.msgget(0, 0o1600)),
                       ("semget", lambda: libc.semget(0, 1, 0o1600)),
                       ("mq_open", lambda: rt.mq_open(b"/sbx-probe", os.O_CREAT | os.O_RDWR, 0o600, None))]:
        ctypes.set_errno(0)
        out[name] = 0 if call() >= 0 else ctypes.get_errno()
    return out


def probe(cfg):
    """What the jail applied, seen from inside (checked by the parent; see jail.check_probe). It ends by
    setting the call's rlimits and reading them back."""
    import ctypes  # noqa: PLC0415 - probe mode only, never with untrusted code
    import json  # noqa: PLC0415
    import socket  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    try:
        with open("/probe-write", "w"):
            root_writable = True
    except OSError:
        root_writable = False
    tmp = os.statvfs(cfg["workdir"])
    report = {
        "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": sorted(set(os.getgroups()) - {os.getgid()}),
        "no_new_privs": libc.prctl(39, 0, 0, 0, 0),  # PR_GET_NO_NEW_PRIVS
        "seccomp_mode": libc.prctl(21, 0, 0, 0, 0),  # PR_GET_SECCOMP: 2 = filter
        "capabilities": _capabilities(libc, ctypes),
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "root_writable": root_writable, "proc_visible": os.path.exists("/proc/self"),
        "fork_errno": _errno_of(_try_fork), "families_open": _open_families(socket),
        "memfd_errno": _errno_of(lambda: os.close(os.memfd_create("sbx-probe"))), "ipc_errnos": _libc_errnos(libc, ctypes),
        "tmpfs_bytes": tmp.f_blocks * tmp.f_frsize, "tmpfs_inodes": tmp.f_files,
        "python": sys.version.split()[0],
    }
    set_limits(cfg)
    report["rlimits"] = {name: list(resource.getrlimit(which)) for name, which in RLIMITS.items()}
    report["thread_stack"] = _thread.stack_size()
    return json.dumps(report)


def probe_userns():
    """Whether a new user namespace can be made by raw ``clone(CLONE_NEWUSER)``: the route seccomp leaves
    open in this probe's filter (``unshare`` is denied by seccomp, so it cannot tell whether bwrap's
    --disable-userns took effect). 0 = one was created."""
    import ctypes  # noqa: PLC0415
    import json  # noqa: PLC0415
    import platform  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    nr = {"x86_64": 56, "aarch64": 220}[platform.machine()]
    ctypes.set_errno(0)
    pid = libc.syscall(nr, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD, fork-like (same stack, copied)
    if pid == 0:
        os._exit(0)
    err = ctypes.get_errno() if pid < 0 else 0
    if pid > 0:
        os.waitpid(pid, 0)
    return json.dumps({"userns_errno": err})


def _resolve(path, dir_fd_possible):
    if isinstance(path, int):
        return None  # an already-open descriptor
    path = os.fsdecode(os.fspath(path))
    if dir_fd_possible and not os.path.isabs(path):
        return "relative"
    return os.path.realpath(path)


def make_hook(workdir, read_roots):
    """The audit hook. Every name it uses is bound here, in its closure, when it is built."""
    deny_exact, process_events, deny_prefixes = DENY_EXACT, PROCESS_EVENTS, DENY_PREFIXES
    deny_ctypes, deny_imports, write_events, list_events = DENY_CTYPES, DENY_IMPORTS, WRITE_EVENTS, LIST_EVENTS
    write_flags, realpath, fsdecode, fspath, sep, resolve = _WRITE_FLAGS, os.path.realpath, os.fsdecode, os.fspath, os.sep, _resolve
    workdir = realpath(workdir)
    read_roots = tuple(sorted({realpath(r) for r in read_roots if r}))
    read_files = frozenset({"/dev/null", "/dev/urandom", "/dev/random", "/dev/zero"})

    def inside(path, root):
        return path == root or path.startswith(root + sep)

    def deny(what):
        raise PermissionError("[sandbox] " + what + " is not allowed in the python sandbox")

    def check_read(path):
        if path in read_files or inside(path, workdir) or any(inside(path, r) for r in read_roots):
            return
        deny("reading " + path + " (outside the working directory)")

    def check_write(path):
        if not inside(path, workdir):
            deny("writing " + path + " (outside the working directory)")

    def check_paths(args, check):
        for a in args:
            if isinstance(a, (str, bytes)) or hasattr(a, "__fspath__"):
                check(realpath(fsdecode(fspath(a))))

    def hook(event, args):
        if event in deny_exact or event.startswith(deny_prefixes):
            deny("process creation (" + event + ")" if event in process_events else event)
        if event in deny_ctypes or event == "ctypes.dlopen" and args[0] is not None:
            deny("native code access through ctypes (" + event + ")")
        if event == "import" and args[0] in deny_imports:
            deny("importing " + args[0] + " (process creation, network and native calls are blocked)")
        if event == "object.__setattr__" and len(args) > 1 and any(args[0] is g for g in guarded):
            deny("replacing " + str(args[1]))
        if event == "open":
            path, mode, flags = args
            resolved = resolve(path, mode is None)
            if resolved is None:
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                mode is None and bool(flags & write_flags))
            if resolved == "relative":
                if writing or ".." in fsdecode(fspath(path)).split(sep):
                    deny("os.open with a relative path (use an absolute path or open())")
                return
            (check_write if writing else check_read)(resolved)
        elif event in write_events:
            check_paths(args, check_write)
        elif event in list_events:
            check_paths(args[:1] or (".",), check_read)
        elif event == "sqlite3.connect" and args and args[0] != ":memory:":
            check_paths(args[:1], check_write)

    guarded = (hook, deny, check_read, check_write, check_paths, inside, resolve, realpath)
    return hook


def python_read_roots():
    """Directories the interpreter needs to import the standard library and installed packages
    (sys.path holds the stdlib, lib-dynload and site directories after ``site`` ran)."""
    return {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path}


def _excepthook(exc_type, exc, tb):
    # Hide the bootstrap's own frames (main, the audit hook): the agent only needs its code's traceback.
    import traceback  # noqa: PLC0415 - only when the program fails (keeps every call's start fast)

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
    cfg = parse_config(sys.argv[1])
    if os.getuid() == 0 or os.geteuid() == 0:
        sys.stderr.write("[sandbox] refusing to run as uid 0: the jail did not drop privileges\n")
        sys.exit(EXIT_UNSAFE)
    if cfg.get("probe") == "userns":
        print(probe_userns())
        return
    if cfg.get("probe"):
        print(probe(cfg))
        return
    set_limits(cfg)
    workdir = cfg["workdir"]
    os.chdir(workdir)
    sys.stdout.reconfigure(encoding="utf-8", errors="replace")
    sys.stderr.reconfigure(encoding="utf-8", errors="replace")
    sys.stderr.buffer.write(READY)
    sys.stderr.flush()
    sys.excepthook = _excepthook
    with open(cfg["code_path"], encoding="utf-8") as fh:
        source = fh.read()
    code = compile(source, "main.py", "exec")
    sys.argv = ["main.py"]
    sys.path[:] = [p for p in sys.path if p and os.path.dirname(os.path.realpath(__file__)) != os.path.realpath(p)]
    if cfg.get("audit_hook", True):
        stub_posixsubprocess()
        sys.addaudithook(make_hook(workdir, python_read_roots()))
    module = types.ModuleType("__main__")
    module.__file__ = "main.py"
    sys.modules["__main__"] = module
    exec(code, module.__dict__)  # noqa: S102 - the point of this process; it is the sandboxed child


if __name__ == "__main__":
    main()
