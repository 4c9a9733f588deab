"""A seccomp-BPF deny list for the python sandbox, compiled here in pure Python (no libseccomp).

The program is handed to bubblewrap (``bwrap --seccomp FD``), which installs it as the very last
step before it executes the sandboxed interpreter: bubblewrap's own namespace setup is not
filtered, the untrusted code is.

What it does, in order:

1. the syscall ABI must be the native one (x86_64 or aarch64); any other ABI (e.g. the i386
   ``int 0x80`` entry on x86_64) kills the process, so a filter written for one table cannot be
   bypassed through another;
2. on x86_64, x32 syscall numbers (bit 30 set) fail with EPERM;
3. :data:`DENIED` syscalls fail with EPERM: the kernel interfaces behind most container escapes and
   local privilege escalations (ptrace and cross-process memory, bpf, perf, userfaultfd, io_uring,
   keyrings, mounts and namespaces, module and kexec loading, handle-based opens, clock setting);
   Also denied, because what they allocate escapes every per-process limit (RLIMIT_AS counts only
   what a process maps): ``memfd_create``/``memfd_secret`` (anonymous files), SysV IPC
   (``shmget``, ``msgget``, ``semget``) and POSIX message queues (``mq_open``);
4. ``clone3`` fails with ENOSYS, so the C library falls back to ``clone``, whose flags a filter can
   read (clone3 passes them in memory);
5. ``clone`` with a namespace flag (:data:`CLONE_NAMESPACES`) fails with EPERM, so no user or other namespace is
   created from inside, also where bwrap's ``--disable-userns`` cannot be applied (a container's read-only
   ``/proc/sys``; with ``unshare``, ``setns`` and ``clone3`` denied above, ``clone`` is the only way left);
6. unless ``allow_fork``: ``clone`` without ``CLONE_THREAD`` (``fork``, ``vfork``, ``posix_spawn``)
   and the ``fork``/``vfork`` syscalls fail with EPERM. Threads are allowed. The program is then one
   process, so RLIMIT_AS and RLIMIT_CPU bound the whole call (with ``allow_fork`` they hold per
   process: a forked child gets a fresh allowance);
7. ``socket``/``socketpair`` only for ``AF_UNIX`` and ``AF_NETLINK``/``NETLINK_ROUTE`` (interface
   listing); every other family (``AF_VSOCK``, which reaches the host, ``AF_INET``/``AF_INET6``,
   whose loopback buffers are kernel memory, ``AF_PACKET``, ``AF_ALG``, ...) fails with EAFNOSUPPORT;
8. everything else is allowed.

What is NOT covered: it is a deny list, not an allow list (a new kernel interface is allowed until
it is added here); it does not inspect ``ioctl`` requests. It is defence in depth under the
namespaces, the unprivileged uid and no-new-privileges, which are the boundary.
"""

from __future__ import annotations

import errno
import platform
import struct

# Offsets in struct seccomp_data and BPF opcodes (linux/filter.h, linux/seccomp.h).
_NR, _ARCH = 0, 4
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_ARG0, _ARG2 = 16, 32  # low 32 bits of args[0] / args[2] (little-endian: both arches here)
CLONE_THREAD = 0x00010000
#: ``clone`` flags that create a namespace (CLONE_NEWNS, _NEWCGROUP, _NEWUTS, _NEWIPC, _NEWUSER, _NEWPID, _NEWNET;
#: CLONE_NEWTIME shares the exit-signal byte of ``clone`` and exists only for ``clone3``/``unshare``, both denied).
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
AF_UNIX, AF_NETLINK, NETLINK_ROUTE = 1, 16, 0
_RET_KILL_PROCESS, _RET_ALLOW, _RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_X32_BIT = 0x40000000

#: The syscalls denied with EPERM, by name.
DENIED: tuple[str, ...] = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key",
    "mount", "umount2", "pivot_root", "chroot", "setns", "unshare", "mount_setattr", "move_mount",
    "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at", "syslog",
    "personality", "lookup_dcookie", "vhangup", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "fanotify_init", "nfsservctl",
    "memfd_create", "memfd_secret", "shmget", "msgget", "semget", "mq_open",
)
#: Legacy interfaces, denied where the architecture has them (x86_64; aarch64 never had them): ``modify_ldt`` (the
#: LDT, behind several kernel bugs), ``uselib`` (a.out loader), ``ustat``, ``sysfs``, ``_sysctl`` (obsolete
#: interfaces), ``iopl``/``ioperm`` (port I/O). ``vm86``/``vm86old`` exist only in the i386 table, whose ABI step 1
#: kills; ``personality`` is in :data:`DENIED`.
LEGACY_DENIED: tuple[str, ...] = ("modify_ldt", "uselib", "ustat", "sysfs", "_sysctl", "iopl", "ioperm")
#: Denied unless ``allow_fork`` (x86_64 only: aarch64 has no such syscalls, only ``clone``).
FORK_SYSCALLS: tuple[str, ...] = ("fork", "vfork")

#: Per architecture: (AUDIT_ARCH value, syscall numbers). From the kernel's uapi headers
#: (asm/unistd_64.h for x86_64, asm-generic/unistd.h for aarch64).
ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
        "process_madvise": 440, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248, "request_key": 249,
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "setns": 308, "unshare": 272,
        "mount_setattr": 442, "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "quotactl": 179,
        "open_by_handle_at": 304, "name_to_handle_at": 303, "syslog": 103, "personality": 135,
        "lookup_dcookie": 212, "vhangup": 153, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305,
        "adjtimex": 159, "fanotify_init": 300, "nfsservctl": 180, "clone3": 435,
        "memfd_create": 319, "memfd_secret": 447, "shmget": 29, "msgget": 68, "semget": 64, "mq_open": 240,
        "fork": 57, "vfork": 58, "clone": 56, "socket": 41, "socketpair": 53,
        "modify_ldt": 154, "uselib": 134, "ustat": 136, "sysfs": 139, "_sysctl": 156, "iopl": 172, "ioperm": 173,
    }),
    "aarch64": (0xC00000B7, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "pidfd_getfd": 438,
        "process_madvise": 440, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219, "add_key": 217, "request_key": 218,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "setns": 268, "unshare": 97,
        "mount_setattr": 442, "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "quotactl": 60,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "syslog": 116, "personality": 92,
        "lookup_dcookie": 18, "vhangup": 58, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266,
        "adjtimex": 171, "fanotify_init": 262, "nfsservctl": 42, "clone3": 435,
        "memfd_create": 279, "memfd_secret": 447, "shmget": 194, "msgget": 186, "semget": 190, "mq_open": 180,
        "clone": 220, "socket": 198, "socketpair": 199,
    }),
}


class SeccompUnsupportedError(RuntimeError):
    """No syscall table for this machine's architecture."""


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)  # struct sock_filter


def _clone_block(numbers: dict[str, int], eperm: int) -> list[bytes]:
    """``clone`` without CLONE_THREAD (a new process) -> EPERM; a thread -> allowed."""
    return [_insn(_JEQ_K, 0, 4, numbers["clone"]), _insn(_LD_W_ABS, 0, 0, _ARG0),
            _insn(_JSET_K, 0, 1, CLONE_THREAD), _insn(_RET_K, 0, 0, _RET_ALLOW), _insn(_RET_K, 0, 0, eperm)]


def _clone_namespace_block(numbers: dict[str, int], eperm: int) -> list[bytes]:
    """``clone`` with any namespace flag -> EPERM; otherwise on to the next block with the syscall number reloaded."""
    return [_insn(_JEQ_K, 0, 4, numbers["clone"]), _insn(_LD_W_ABS, 0, 0, _ARG0),
            _insn(_JSET_K, 0, 1, CLONE_NAMESPACES), _insn(_RET_K, 0, 0, eperm), _insn(_LD_W_ABS, 0, 0, _NR)]


def _socket_block(numbers: dict[str, int]) -> list[bytes]:
    """``socket``/``socketpair``: AF_UNIX, or AF_NETLINK with NETLINK_ROUTE; else EAFNOSUPPORT."""
    refuse = _RET_ERRNO | errno.EAFNOSUPPORT
    return [_insn(_JEQ_K, 1, 0, numbers["socket"]), _insn(_JEQ_K, 0, 7, numbers["socketpair"]),
            _insn(_LD_W_ABS, 0, 0, _ARG0), _insn(_JEQ_K, 3, 0, AF_UNIX), _insn(_JEQ_K, 0, 3, AF_NETLINK),
            _insn(_LD_W_ABS, 0, 0, _ARG2), _insn(_JEQ_K, 0, 1, NETLINK_ROUTE), _insn(_RET_K, 0, 0, _RET_ALLOW),
            _insn(_RET_K, 0, 0, refuse)]


def build_program(machine: str | None = None, *, allow_fork: bool = False, clone_namespaces: bool = True) -> bytes:
    """The BPF program (an array of ``struct sock_filter``) for ``machine`` (default: this one).
    ``clone_namespaces=False`` leaves out point 5: only the jail's probe of bwrap's ``--disable-userns`` uses it."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise SeccompUnsupportedError(
            f"no seccomp syscall table for architecture {machine!r} (supported: {', '.join(sorted(ARCHES))})")
    audit_arch, numbers = ARCHES[machine]
    denied = [*DENIED, *[n for n in LEGACY_DENIED if n in numbers],
              *([] if allow_fork else [n for n in FORK_SYSCALLS if n in numbers])]
    deny = sorted({numbers[name] for name in denied})
    eperm, enosys = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    prog = [_insn(_LD_W_ABS, 0, 0, _ARCH), _insn(_JEQ_K, 1, 0, audit_arch), _insn(_RET_K, 0, 0, _RET_KILL_PROCESS),
            _insn(_LD_W_ABS, 0, 0, _NR)]
    if machine == "x86_64":
        prog += [_insn(_JGE_K, 0, 1, _X32_BIT), _insn(_RET_K, 0, 0, eperm)]
    prog += [_insn(_JEQ_K, 0, 1, numbers["clone3"]), _insn(_RET_K, 0, 0, enosys)]
    for nr in deny:
        prog += [_insn(_JEQ_K, 0, 1, nr), _insn(_RET_K, 0, 0, eperm)]
    if clone_namespaces:  # no namespace from inside, even where --disable-userns cannot be applied
        prog += _clone_namespace_block(numbers, eperm)
    if not allow_fork:
        prog += _clone_block(numbers, eperm)
    prog += _socket_block(numbers)  # both blocks end in a return: the accumulator no longer holds the number
    prog.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(prog)
