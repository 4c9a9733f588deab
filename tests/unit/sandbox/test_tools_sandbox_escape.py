"""Escape suite of the python sandbox: each attack class runs three times, with the in-process audit
hook (as deployed) and WITHOUT it (``audit_hook=False``), so the bubblewrap jail alone must hold, once
as configured by default and once with ``allow_fork=True`` (no seccomp fork denial to lean on).

An attack prints ``ESCAPED`` when it got through and, without the hook, ``DONE`` once every attempt
ran (so a failure to escape is the jail's doing, not a bug in the attack). Host-side checks look at
what the attack aimed for from outside: the canary secret in the worker's environment and in a host
file, a listener on the host's loopback, a process left running, a file written on the host.

Every class runs here (CI and this machine run as root with unprivileged user namespaces); a class
that needs root to be meaningful is skipped with its reason printed, never silently.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamgrpo.rollout.tools.python_sandbox import PythonSandbox
from streamgrpo.sandbox.config import SandboxSettings

CANARY = "streamgrpo-canary-" + uuid.uuid4().hex
LIMITS = {"cpu_seconds": 5, "wall_seconds": 20.0, "memory_mb": 256, "disk_mb": 8, "max_processes": 16,
          "max_open_files": 32}
ON_TIMEOUT_WALL_S = 4.0  # the class that must overrun the wall clock gets its own, shorter one


@dataclass(frozen=True)
class Attack:
    code: str
    runs_to_done: bool = True  # without the hook, the attack code must reach its final print("DONE")
    overruns_wall_clock: bool = False  # the attack ends by the wall-clock kill


LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
# The jail's seccomp denies fork unless allow_fork: the attack goes on to its end either way.
FORK = "import os\ntry:\n    pid = os.fork()\nexcept OSError as e:\n    print('no fork', e)\n    pid = -1\n"

ATTACKS: dict[str, Attack] = {
    # 1. The exploit: rewrite the guard's globals, then run a shell command.
    "guard_rewrite_globals": Attack(
        "import __main__ as b\nb.DENY_EXACT = frozenset(); b._inside = lambda p, r: True\n"
        "import sys\nfor m in list(sys.modules.values()):\n    if hasattr(m, 'DENY_EXACT'):\n"
        "        m.DENY_EXACT = frozenset(); m.DENY_PREFIXES = ()\n"
        "import subprocess\ntry:\n    out = subprocess.run(['id', '-u'], capture_output=True, text=True).stdout.strip()\n"
        "except OSError as e:\n    out = 'no process: %s' % e\n"
        "print('ESCAPED as root' if out == '0' else 'uid ' + out)\nprint('DONE')\n"),
    # 2. Re-exec a fresh interpreter (no audit hook) and try to read the host from there.
    "reexec_without_guard": Attack(
        "import os\nos.execv('/usr/bin/python3', ['python3', '-c', "
        "'import os\\ntry:\\n    print(\"ESCAPED\", open(\"__CANARY_FILE__\").read())\\nexcept OSError as e:\\n"
        "    print(\"no\", e)\\nprint(\"DONE\")'])\n"),
    # 3. Read the worker's environment (API keys) through /proc.
    "parent_environ_via_proc": Attack(
        "import os\nfound = []\nfor p in ['/proc/1/environ', '/proc/__HOST_PID__/environ', '/proc/self/../1/environ']:\n"
        "    try:\n        found.append(open(p, 'rb').read().decode('latin-1'))\n    except OSError as e:\n        print('no', p, e)\n"
        "try:\n    pids = [d for d in os.listdir('/proc') if d.isdigit()]\nexcept OSError:\n    pids = []\n"
        "for d in pids:\n    try:\n        found.append(open('/proc/%s/environ' % d, 'rb').read().decode('latin-1'))\n"
        "    except OSError:\n        pass\n"
        "print('ESCAPED' if any('__CANARY__' in f for f in found) else 'no canary')\nprint(dict(os.environ))\nprint('DONE')\n"),
    # 4. Read host files: the canary file, /etc/shadow, root's home, the project.
    "host_file_read": Attack(
        "for p in ['__CANARY_FILE__', '/etc/shadow', '/etc/passwd', '/root/.bashrc', '__THIS_FILE__']:\n"
        "    try:\n        print('ESCAPED', p, open(p).read()[:80])\n    except OSError as e:\n        print('no', p, e)\n"
        "print('DONE')\n"),
    # 5. Host kernel interfaces: /proc and /sys are not mounted.
    "proc_and_sys": Attack(
        "import os\nfor p in ['/proc/self/status', '/proc/1/root/etc/hostname', '/sys/kernel', '/proc/sys/kernel/hostname',"
        " '/sys/fs/cgroup']:\n    if os.path.exists(p):\n        print('ESCAPED', p)\n"
        "try:\n    open('/proc/sys/kernel/core_pattern', 'w').write('|/bin/sh')\n    print('ESCAPED core_pattern')\n"
        "except OSError as e:\n    print('no', e)\nprint('DONE')\n"),
    # 6. Re-enter the host's namespaces.
    "namespace_reentry": Attack(
        LIBC + "import os, socket\nfor p in ['/proc/1/ns/net', '/proc/__HOST_PID__/ns/net', '/proc/__HOST_PID__/ns/mnt']:\n"
        "    try:\n        fd = os.open(p, os.O_RDONLY)\n        print('ESCAPED' if libc.setns(fd, 0) == 0 else 'no setns')\n"
        "    except OSError as e:\n        print('no', p, e)\n"
        "for fd in range(3, 64):\n    if libc.setns(fd, 0) == 0:\n        print('ESCAPED setns fd', fd)\n"
        "names = [n for _, n in socket.if_nameindex()]\nprint('ESCAPED' if names != ['lo'] else 'only lo', names)\nprint('DONE')\n"),
    # 7. A nested user namespace (would give capabilities over new namespaces).
    "nested_user_namespace": Attack(
        LIBC + "for flags in (0x10000000, 0x10000000 | 0x00020000, 0x00020000, 0x40000000):\n"
        "    print('ESCAPED unshare', hex(flags)) if libc.unshare(flags) == 0 else print('no', hex(flags), ctypes.get_errno())\n"
        "print('DONE')\n"),
    # 8. TCP to a listener on the host's loopback.
    "network_tcp_host_loopback": Attack(
        "import socket\ntry:\n    s = socket.socket()\n    s.settimeout(1)\n    rc = s.connect_ex(('127.0.0.1', __PORT__))\n"
        "except OSError as e:\n    rc = e\n"
        "print('ESCAPED' if rc == 0 else 'refused', rc)\nprint('DONE')\n"),
    # 9. Abstract unix sockets are per network namespace.
    "network_abstract_unix": Attack(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('\\0__TOKEN__')\n    print('ESCAPED')\n"
        "except OSError as e:\n    print('no', e)\nprint('DONE')\n"),
    # 10. A unix socket file on the host (like a container runtime's).
    "network_unix_socket_file": Attack(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('__UNIX_PATH__')\n    print('ESCAPED')\n"
        "except OSError as e:\n    print('no', e)\nprint('DONE')\n"),
    # 11. The outside world: DNS, UDP, TCP to a public address.
    "network_outside": Attack(
        "import socket\ntry:\n    print('ESCAPED dns', socket.getaddrinfo('pypi.org', 443))\nexcept OSError as e:\n    print('no dns', e)\n"
        "for fam, kind, addr in [(socket.AF_INET, socket.SOCK_DGRAM, ('1.1.1.1', 53)), (socket.AF_INET, socket.SOCK_STREAM, "
        "('1.1.1.1', 443)), (socket.AF_INET6, socket.SOCK_STREAM, ('2606:4700:4700::1111', 443))]:\n"
        "    try:\n        s = socket.socket(fam, kind)\n        s.settimeout(1)\n        s.connect(addr); s.send(b'x')\n"
        "        print('ESCAPED', addr)\n    except OSError as e:\n        print('no', addr, e)\nprint('DONE')\n"),
    # 12. Raw and packet sockets (sniffing, spoofing).
    "network_raw_packet": Attack(
        "import socket\nfor fam, kind, proto in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), "
        "(socket.AF_PACKET, socket.SOCK_RAW, 0x0300)]:\n    try:\n        socket.socket(fam, kind, proto)\n        print('ESCAPED raw')\n"
        "    except OSError as e:\n        print('no', e)\nprint('DONE')\n"),
    # 13. A setsid'd grandchild that outlives the call.
    "detached_setsid_child": Attack(
        FORK + "if pid == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv('/usr/bin/sleep', ['sleep', '__SLEEP__'])\n    os._exit(0)\nif pid > 0:\n    os.wait()\nprint('DONE')\n"),
    # 14. The same, while the program itself overruns the wall clock and is killed.
    "detached_child_on_timeout": Attack(
        FORK + "import time\nif pid == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv('/usr/bin/sleep', ['sleep', '__SLEEP__'])\n    os._exit(0)\nif pid > 0:\n    os.wait()\n"
        "print('DONE', flush=True)\n"
        "time.sleep(60)\n", overruns_wall_clock=True),
    # 15. Fork bomb.
    "fork_bomb": Attack(
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
        "        n += 1\nexcept OSError as e:\n    print('stopped after', n, e)\nprint('ESCAPED' if n > 64 else 'bounded')\n"
        "print('DONE')\n"),
    # 16. Thread bomb.
    "thread_bomb": Attack(
        "import threading, time\nn = 0\ntry:\n    while True:\n        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "        n += 1\nexcept RuntimeError as e:\n    print('stopped after', n, e)\nprint('ESCAPED' if n > 64 else 'bounded')\n"
        "print('DONE')\n"),
    # 17. Memory bomb.
    "memory_bomb": Attack(
        "import mmap\ntry:\n    x = bytearray(4 * 1024 ** 3)\n    print('ESCAPED bytearray')\nexcept MemoryError:\n    print('no bytearray')\n"
        "try:\n    m = mmap.mmap(-1, 2 * 1024 ** 3)\n    print('ESCAPED mmap')\nexcept (OSError, MemoryError) as e:\n    print('no mmap', e)\n"
        "print('DONE')\n"),
    # 18. Disk bomb: fill the working directory, many files under the per-file limit.
    "disk_bomb": Attack(
        "import os\ntotal = 0\ntry:\n    for i in range(__DISK_MB__):  # at most 4x the quota\n        with open('/tmp/f%d' % i, 'wb') as fh:\n"
        "            for _ in range(4):\n                fh.write(b'x' * (1 << 20)); fh.flush(); total += 1 << 20\n"
        "except OSError as e:\n    print('stopped', e)\nprint('ESCAPED' if total > __DISK_MB__ * (1 << 20) else 'bounded', total)\n"
        "print('DONE')\n"),
    # 19. Disk elsewhere: every other place in the jail is read-only or absent.
    "disk_outside_quota": Attack(
        "import os\nfor p in ['/x', '/dev/x', '/dev/shm/x', '/usr/x', '/usr/lib/x', '/sandbox/main.py', '/sandbox/bootstrap.py',"
        " '/var/tmp/x', '/run/x', '/home/x', '/root/x', '__HOST_DIR__/x']:\n    try:\n        with open(p, 'a') as fh:\n"
        "            fh.write('__TOKEN__')\n        print('ESCAPED', p)\n    except OSError as e:\n        print('no', p, e)\nprint('DONE')\n"),
    # 20. Library side doors for writing outside (tar/zip path traversal, sqlite, logging, shutil, tempfile).
    "library_side_doors": Attack(
        "import io, os, tarfile, zipfile, sqlite3, logging, shutil, tempfile\nwins = []\n"
        "def attempt(name, fn):\n    try:\n        fn(); wins.append(name)\n    except Exception as e:\n        print('no', name, type(e).__name__)\n"
        "def tar():\n    buf = io.BytesIO()\n    with tarfile.open(fileobj=buf, mode='w') as t:\n"
        "        info = tarfile.TarInfo('../../../__HOST_DIR__/tar-__TOKEN__'); data = b'x'; info.size = 1\n"
        "        t.addfile(info, io.BytesIO(data))\n    buf.seek(0)\n    tarfile.open(fileobj=buf).extractall('/tmp')\n"
        "    assert os.path.exists('__HOST_DIR__/tar-__TOKEN__')\n"
        "def zipit():\n    buf = io.BytesIO()\n    with zipfile.ZipFile(buf, 'w') as z:\n        z.writestr('../../__HOST_DIR__/zip-__TOKEN__', 'x')\n"
        "    zipfile.ZipFile(buf).extractall('/tmp')\n    assert os.path.exists('__HOST_DIR__/zip-__TOKEN__')\n"
        "attempt('tar', tar)\nattempt('zip', zipit)\n"
        "attempt('sqlite', lambda: sqlite3.connect('__HOST_DIR__/db-__TOKEN__').execute('create table t(x)'))\n"
        "attempt('logging', lambda: logging.FileHandler('__HOST_DIR__/log-__TOKEN__'))\n"
        "attempt('shutil', lambda: shutil.copy('/usr/bin/python3', '__HOST_DIR__/py-__TOKEN__'))\n"
        "attempt('tempfile', lambda: tempfile.mkstemp(dir='__HOST_DIR__'))\n"
        "attempt('dir_fd', lambda: os.open('x-__TOKEN__', os.O_CREAT | os.O_WRONLY, dir_fd=os.open('/', os.O_RDONLY)))\n"
        "print('ESCAPED', wins) if wins else print('none')\nprint('DONE')\n"),
    # 21. Symlink and hard-link tricks towards host files.
    "symlink_tricks": Attack(
        "import os\nfor target in ['__CANARY_FILE__', '/proc/self/root/__CANARY_FILE__', '/proc/1/cwd', '/etc/shadow']:\n"
        "    link = '/tmp/l' + str(abs(hash(target)))\n    try:\n        os.symlink(target, link)\n"
        "        print('ESCAPED', target, open(link).read()[:40])\n    except OSError as e:\n        print('no', target, e)\n"
        "try:\n    os.link('/usr/bin/python3', '/tmp/hard')\n    print('ESCAPED hardlink')\nexcept OSError as e:\n    print('no link', e)\n"
        "print('DONE')\n"),
    # 22. File-descriptor bomb and inherited descriptors.
    "fd_bomb_and_inherited_fds": Attack(
        "import os\nleaked = []\nfor fd in range(3, 256):\n    try:\n        os.fstat(fd); leaked.append(fd)\n    except OSError:\n        pass\n"
        "print('ESCAPED leaked fds', leaked) if leaked else print('no inherited fds')\nfds = []\ntry:\n    while True:\n"
        "        fds.append(os.open('/dev/null', os.O_RDONLY))\nexcept OSError as e:\n    print('stopped after', len(fds), e)\n"
        "print('ESCAPED' if len(fds) > 64 else 'bounded')\nprint('DONE')\n"),
    # 23. Signals to the parent, the whole session, every process.
    "signals_to_parent": Attack(
        "import os, signal\nfor what, fn in [('ppid', lambda: os.kill(os.getppid(), signal.SIGKILL)), "
        "('host pid', lambda: os.kill(__HOST_PID__, signal.SIGKILL)), ('pgrp 0', lambda: os.killpg(0, signal.SIGCONT)), "
        "('all', lambda: os.kill(-1, signal.SIGCONT))]:\n    try:\n        fn(); print('sent', what)\n"
        "    except OSError as e:\n        print('no', what, e)\nprint('DONE')\n"),
    # 24. ptrace and cross-process memory.
    "ptrace_and_process_memory": Attack(
        LIBC + "import os\nprint('ESCAPED') if libc.ptrace(16, 1, 0, 0) == 0 else print('no ptrace', ctypes.get_errno())\n"
        "print('ESCAPED') if libc.ptrace(0, 0, 0, 0) == 0 else print('no traceme', ctypes.get_errno())\n"
        "buf = ctypes.create_string_buffer(8)\n"
        "class V(ctypes.Structure):\n    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
        "v = V(ctypes.addressof(buf), 8)\n"
        "print('ESCAPED') if libc.process_vm_readv(1, ctypes.byref(v), 1, ctypes.byref(v), 1, 0) >= 0 else print('no vm_readv')\n"
        "try:\n    open('/proc/1/mem', 'rb')\n    print('ESCAPED mem')\nexcept OSError as e:\n    print('no mem', e)\nprint('DONE')\n"),
    # 25. Kernel attack surface behind most local privilege escalations, incl. the x32 ABI: seccomp answers
    #     EPERM before the kernel's implementation sees the (null) arguments, which would give EFAULT/EINVAL.
    "kernel_attack_surface": Attack(
        LIBC + "import platform\nnrs = {'x86_64': {'bpf': 321, 'perf_event_open': 298, 'userfaultfd': 323, 'io_uring_setup': 425,"
        " 'keyctl': 250, 'add_key': 248, 'mount': 165, 'pivot_root': 155, 'kexec_load': 246, 'open_by_handle_at': 304,"
        " 'x32 ptrace': 0x40000000 | 101}, 'aarch64': {'bpf': 280, 'perf_event_open': 241, 'userfaultfd': 282,"
        " 'io_uring_setup': 425, 'keyctl': 219, 'add_key': 217, 'mount': 40, 'pivot_root': 41, 'kexec_load': 104,"
        " 'open_by_handle_at': 265}}[platform.machine()]\n"
        "for name, nr in nrs.items():\n    rc = libc.syscall(nr, 0, 0, 0, 0, 0)\n    err = ctypes.get_errno()\n"
        "    print('ESCAPED: reached the kernel' if rc >= 0 or err != 1 else 'no (EPERM)', name, rc, err)\nprint('DONE')\n"),
    # 26. Setuid binaries cannot raise privileges (no-new-privs, nosuid mounts).
    "setuid_escalation": Attack(
        LIBC + "import os, subprocess\nnnp = libc.prctl(39, 0, 0, 0, 0)\nnosuid = bool(os.statvfs('/usr').f_flag & os.ST_NOSUID)\n"
        "print('no_new_privs', nnp, 'nosuid', nosuid)\nprint('ESCAPED' if not nnp and not nosuid else 'guarded')\n"
        "for cmd in (['su', '-c', 'id -u'], ['mount', '-t', 'tmpfs', 'none', '/tmp'], ['unshare', '-r', 'id', '-u']):\n"
        "    try:\n        r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=3)\n"
        "        print('ESCAPED' if r.returncode == 0 else 'no', cmd[0], r.stdout.strip(), r.stderr.strip()[:80])\n"
        "    except (OSError, subprocess.SubprocessError) as e:\n        print('no', cmd[0], e)\nprint('DONE')\n"),
    # 27. Raise the resource limits back.
    "raise_rlimits": Attack(
        "import resource\nfor r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE,"
        " resource.RLIMIT_FSIZE):\n    soft, hard = resource.getrlimit(r)\n    try:\n"
        "        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n        print('ESCAPED', r)\n"
        "    except (ValueError, OSError) as e:\n        print('no', r, e)\nprint('DONE')\n"),
    # 28. Devices and the terminal (TIOCSTI injection into the worker's tty).
    "devices_and_tty": Attack(
        "import os, fcntl, termios\nfor p in ['/dev/tty', '/dev/mem', '/dev/kmem', '/dev/port', '/dev/kmsg', '/dev/vda', '/dev/sda',"
        " '/dev/nvme0n1', '/dev/console']:\n    try:\n        os.open(p, os.O_RDWR)\n        print('ESCAPED', p)\n"
        "    except OSError as e:\n        print('no', p, e)\n"
        "try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('ESCAPED TIOCSTI')\nexcept OSError as e:\n    print('no TIOCSTI', e)\n"
        "print('DONE')\n"),
    # 29. Memory no rlimit counts (issue 24: +192 MB of memfd pages, +384 MB of SysV shm).
    "memory_outside_rlimits": Attack(
        LIBC + "import os\ntry:\n    fd = os.memfd_create('m')\n    os.ftruncate(fd, 1 << 20)\n    print('ESCAPED memfd')\n"
        "except OSError as e:\n    print('no memfd', e)\n"
        "for name, call in [('shmget', lambda: libc.shmget(0, 1 << 20, 0o1600)), ('msgget', lambda: libc.msgget(0, 0o1600)),"
        " ('mq_open', lambda: libc.mq_open(b'/q', os.O_CREAT | os.O_RDWR, 0o600, None))]:\n"
        "    print('ESCAPED', name) if call() >= 0 else print('no', name, ctypes.get_errno())\nprint('DONE')\n"),
    # 30. AF_VSOCK shares the host's port space (issue 24); other families the jail has no use for.
    "vsock_and_other_families": Attack(
        "import socket\nfor fam, kind in [(40, socket.SOCK_STREAM), (40, socket.SOCK_DGRAM), (38, socket.SOCK_SEQPACKET),"
        " (16, socket.SOCK_RAW)]:\n    try:\n        socket.socket(fam, kind, 9 if fam == 16 else 0)\n"
        "        print('ESCAPED family', fam)\n    except OSError as e:\n        print('no', fam, e)\nprint('DONE')\n"),
}

@pytest.fixture(scope="module", params=[(True, False), (False, False), (False, True)],
                ids=["with_audit_hook", "jail_only", "jail_only_allow_fork"])
def sandbox(request: pytest.FixtureRequest) -> PythonSandbox:
    """As deployed; the jail alone (seccomp denies fork); the jail alone with fork allowed (the pid
    namespace, not seccomp, must then take every child with the call)."""
    hook, fork = request.param
    return PythonSandbox(SandboxSettings(audit_hook=hook, allow_fork=fork, **LIMITS), max_output_chars=20_000)


@pytest.fixture
def bait_dir() -> Iterator[Path]:
    """A host directory for bait, outside /tmp: inside the jail /tmp is the sandbox's own tmpfs, so a
    path under the host's /tmp would name a (harmless) file of the sandbox itself."""
    path = Path(tempfile.mkdtemp(prefix="streamgrpo-escape-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host(bait_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Host-side bait: a canary in our environment and in a file, a TCP listener, unix sockets."""
    monkeypatch.setenv("STREAMGRPO_CANARY", CANARY)
    token = "sbx" + uuid.uuid4().hex[:12]
    tmp_path = bait_dir
    canary_file = tmp_path / "canary.txt"
    canary_file.write_text(CANARY)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + token)
    abstract.listen(1)
    abstract.setblocking(False)
    unix_path = tmp_path / "s.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix.listen(1)
    unix.setblocking(False)
    yield {"__CANARY__": CANARY, "__CANARY_FILE__": str(canary_file), "__PORT__": str(tcp.getsockname()[1]),
           "__TOKEN__": token, "__UNIX_PATH__": str(unix_path), "__HOST_DIR__": str(tmp_path),
           "__HOST_PID__": str(os.getpid()), "__THIS_FILE__": __file__, "__DISK_MB__": str(LIMITS["disk_mb"]),
           "__SLEEP__": f"3{int(uuid.uuid4().int % 10**6):06d}.5"}
    for s in (tcp, abstract, unix):
        with pytest.raises(BlockingIOError):
            s.accept()  # nothing ever connected
        s.close()


def _processes_with(arg: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if arg.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_does_not_escape(name: str, sandbox: PythonSandbox, host: dict[str, str], bait_dir: Path) -> None:
    code = ATTACKS[name].code
    for key, value in host.items():
        code = code.replace(key, value)
    if ATTACKS[name].overruns_wall_clock:
        sandbox = PythonSandbox(sandbox.limits.model_copy(update={"wall_seconds": ON_TIMEOUT_WALL_S}),
                                max_output_chars=20_000)
    before = set(bait_dir.iterdir())
    result = sandbox.run({"code": code})
    text = result.as_text()
    assert "ESCAPED" not in text, text
    assert CANARY not in text
    assert set(bait_dir.iterdir()) == before, "the attack wrote into the host directory"
    survivors = _processes_with(host["__SLEEP__"])
    for pid in survivors:  # a failing run must not leave its process behind
        os.kill(pid, signal.SIGKILL)
    assert survivors == [], "a sandboxed process survived the call"
    if not sandbox.limits.audit_hook and ATTACKS[name].runs_to_done:
        assert "DONE" in result.output, f"the attack did not run to its end, so it proves nothing:\n{text}"
    if ATTACKS[name].overruns_wall_clock and not sandbox.limits.audit_hook:  # the hook stops its fork at once
        assert result.error == f"killed: wall-clock limit of {ON_TIMEOUT_WALL_S:g}s exceeded", text
    nxt = sandbox.run({"code": "print(6 * 7)"})
    assert nxt.error is None and nxt.output.strip() == "42"


def test_the_attack_list_is_at_least_twenty_classes() -> None:
    assert len(ATTACKS) >= 20
