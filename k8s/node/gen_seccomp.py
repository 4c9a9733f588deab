"""Generate ``k8s/node/streamgrpo-sandbox.seccomp.json``: the seccomp profile of the pods that run the python tool.

The profile is an **allow list**: the runtime's default (RuntimeDefault) for a container without capabilities, plus
exactly the system calls bubblewrap makes to build the jail (:data:`BWRAP`), and nothing else. Everything not
listed fails with EPERM, as under RuntimeDefault.

RuntimeDefault here is containerd's (``contrib/seccomp/seccomp_default.go``, ``DefaultProfile``, containerd
v2.3.4), evaluated for what these pods are: every capability dropped (so none of its capability-gated rules apply),
a kernel >= 4.8 (its ``ptrace``/``process_vm_*`` rule), and the amd64 and arm64 architecture rules (one file for
both kinds of node; a name an architecture does not have is ignored by libseccomp). The list below is data read
from that file, not its code. Its argument-filtered rules are kept as they are (``socket`` without AF_ALG and
AF_VSOCK, five ``personality`` values, ``clone3`` answering ENOSYS so that libc falls back to ``clone``), but for
``clone``: RuntimeDefault allows it only without namespace flags, and bubblewrap needs every one of them.

What bubblewrap adds, and why (measured with ``strace -f`` of one python-tool call through the real jail,
tests/unit/test_k8s_sandbox.py checks the set against the jail's own command line):

- ``clone`` with CLONE_NEWUSER/NEWNS/NEWPID/NEWNET/NEWIPC/NEWUTS/NEWCGROUP: the jail's namespaces;
- ``unshare``: the nested user namespace of ``--disable-userns``;
- ``mount``, ``umount2``, ``pivot_root``: the jail's own root (bind mounts, tmpfs, /dev, remounts read-only);
- ``sethostname``: ``--hostname sandbox`` in the new UTS namespace.

Usage::

    python k8s/node/gen_seccomp.py            # rewrite the profile
    python k8s/node/gen_seccomp.py --check    # exit 1 if the checked-in profile differs (k8s/validate.py does this)

Not covered: CRI-O's default (containers/common), which differs from containerd's in a few names; a node whose
runtime is CRI-O gets the same allow list, not its own default's.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "streamgrpo-sandbox.seccomp.json"
SOURCE = "containerd v2.3.4 contrib/seccomp/seccomp_default.go (DefaultProfile)"

#: RuntimeDefault's unconditional allow list (containerd v2.3.4).
RUNTIME_DEFAULT: tuple[str, ...] = tuple("""
    accept accept4 access adjtimex alarm bind brk cachestat capget capset chdir chmod chown chown32
    clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64 clock_nanosleep
    clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2 dup3 epoll_create
    epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2
    execve execveat exit exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir
    fchmod fchmodat fchmodat2 fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock fork
    fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex
    futex_requeue futex_time64 futex_wait futex_waitv futex_wake futimesat getcpu getcwd getdents getdents64
    getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid
    getpgrp getpid getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32 getrlimit
    get_robust_list getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getuid32
    getxattr getxattrat inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy
    io_getevents io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit ipc kill
    landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr link linkat
    listen listmount listxattr listxattrat llistxattr _llseek lremovexattr lseek lsetxattr lsm_get_self_attr
    lsm_list_modules lsm_set_self_attr lstat lstat64 madvise membarrier memfd_create memfd_secret mincore mkdir
    mkdirat mknod mknodat mlock mlock2 mlockall map_shadow_stack mmap mmap2 mprotect mq_getsetattr mq_notify
    mq_open mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap mseal
    msgctl msgget msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat
    _newselect open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free
    pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6
    pselect6_time64 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv recvfrom recvmmsg
    recvmmsg_time64 recvmsg remap_file_pages removexattr removexattrat rename renameat renameat2 restart_syscall
    rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend
    rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam
    sched_get_priority_max sched_get_priority_min sched_getscheduler sched_rr_get_interval
    sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam sched_setscheduler sched_yield
    seccomp select semctl semget semop semtimedop semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg
    sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid
    setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32 setrlimit
    set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setuid32 setxattr setxattrat shmat
    shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 sigprocmask sigreturn socketcall socketpair
    splice stat stat64 statfs statfs64 statmount statx symlink symlinkat sync sync_file_range syncfs sysinfo tee
    tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime
    timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times
    tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat uretprobe utime utimensat utimensat_time64
    utimes vfork vmsplice wait4 waitid waitpid write writev
""".split())
#: RuntimeDefault's rules by kernel (>= 4.8) and architecture (amd64; arm, arm64).
RUNTIME_DEFAULT_KERNEL_4_8 = ("process_vm_readv", "process_vm_writev", "ptrace")
RUNTIME_DEFAULT_ARCH = ("arch_prctl", "modify_ldt",  # amd64
                        "arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush",
                        "set_tls")  # arm, arm64
AF_ALG, AF_VSOCK = 38, 40
#: personality(2) values RuntimeDefault allows: PER_LINUX, UNAME26, PER_LINUX32, UNAME26|PER_LINUX32, query.
PERSONALITIES = (0x0, 0x0008, 0x20000, 0x20008, 0xFFFFFFFF)
ARCHITECTURES = ("SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM")

#: What bubblewrap needs beyond RuntimeDefault (see the module docstring): name -> why.
BWRAP = {
    "clone": "the jail's user, mount, pid, net, ipc, uts and cgroup namespaces (RuntimeDefault: no namespace flags)",
    "unshare": "--disable-userns: a nested user namespace that cannot make more",
    "mount": "the jail's root: bind mounts, tmpfs /tmp, /dev, read-only remounts",
    "umount2": "detaching the old root after pivot_root",
    "pivot_root": "switching into the jail's own root",
    "sethostname": "--hostname in the jail's UTS namespace",
}


def allowed() -> set[str]:
    """Every syscall name the profile allows (some only with the argument filters of :func:`profile`)."""
    return {*RUNTIME_DEFAULT, *RUNTIME_DEFAULT_KERNEL_4_8, *RUNTIME_DEFAULT_ARCH, "socket", "personality", *BWRAP}


def runtime_default() -> set[str]:
    """RuntimeDefault's allowed names for a container without capabilities (clone only without namespace flags)."""
    return {*RUNTIME_DEFAULT, *RUNTIME_DEFAULT_KERNEL_4_8, *RUNTIME_DEFAULT_ARCH, "socket", "personality", "clone"}


Rule = dict[str, object]


def _arg(index: int, value: int, op: str) -> Rule:
    return {"index": index, "value": value, "valueTwo": 0, "op": op}


def _rule(names: list[str], comment: str, *, action: str = "SCMP_ACT_ALLOW", **extra: object) -> Rule:
    return {"names": names, "action": action, **extra, "comment": comment}


def profile() -> dict[str, object]:
    plain = sorted({*RUNTIME_DEFAULT, *RUNTIME_DEFAULT_KERNEL_4_8, *RUNTIME_DEFAULT_ARCH} - set(BWRAP))
    socket_rules = [_arg(0, AF_ALG, "SCMP_CMP_LT"), _arg(0, AF_ALG + 1, "SCMP_CMP_EQ"), _arg(0, AF_VSOCK, "SCMP_CMP_GT")]
    syscalls: list[Rule] = [
        _rule(plain, f"RuntimeDefault without capabilities: {SOURCE}, kernel >= 4.8, amd64 and arm64 rules"),
        *(_rule(["socket"], "RuntimeDefault: every address family but AF_ALG and AF_VSOCK", args=[rule])
          for rule in socket_rules),
        *(_rule(["personality"], "RuntimeDefault: these personality values only", args=[_arg(0, value, "SCMP_CMP_EQ")])
          for value in PERSONALITIES),
        _rule(["clone3"], "RuntimeDefault: ENOSYS, so that libc falls back to clone", action="SCMP_ACT_ERRNO",
              errnoRet=errno.ENOSYS),
        _rule(sorted(BWRAP), "bubblewrap's jail (k8s/node/gen_seccomp.py says why each): " + "; ".join(
            f"{name}: {why}" for name, why in sorted(BWRAP.items()))),
    ]
    return {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": errno.EPERM, "architectures": list(ARCHITECTURES),
            "syscalls": syscalls}


CLONE_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET


def runtime_default_profile() -> dict[str, object]:
    """containerd's RuntimeDefault for a container without capabilities, as data (not shipped: the slow image test
    runs the jail under it to show that it refuses): :func:`profile` less :data:`BWRAP`, with RuntimeDefault's
    ``clone`` rule (no namespace flags)."""
    out = profile()
    syscalls: list[Rule] = out["syscalls"]  # type: ignore[assignment]
    rules = [r for r in syscalls if r["names"] != sorted(BWRAP)]
    rules.append(_rule(["clone"], "RuntimeDefault: clone without namespace flags",
                       args=[_arg(0, CLONE_NAMESPACE_FLAGS, "SCMP_CMP_MASKED_EQ")]))
    return {**out, "syscalls": rules}


def render() -> str:
    return json.dumps(profile(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the checked-in profile differs")
    args = parser.parse_args(argv)
    if args.check:
        ok = OUT.is_file() and OUT.read_text() == render()
        print(f"{OUT.name}: " + ("in sync" if ok else "DIFFERS (run )"))
        return 0 if ok else 1
    OUT.write_text(render())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
