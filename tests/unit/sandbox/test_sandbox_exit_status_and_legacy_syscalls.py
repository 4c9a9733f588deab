"""A program's exit status is the program's, never "the sandbox could not start", and the legacy syscalls the
seccomp filter missed fail with EPERM (issue 38, finding 18). Real bubblewrap jails."""

from __future__ import annotations

import errno
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamgrpo.sandbox._sandbox_child import EXIT_UNSAFE
from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.jail import plan_jail
from streamgrpo.sandbox.runner import run_sandboxed

LIMITS = SandboxSettings(cpu_seconds=2, wall_seconds=20, memory_mb=256, audit_hook=False)


@pytest.mark.parametrize("how", ["sys.exit", "os._exit"])
def test_a_program_that_exits_121_is_reported_as_its_own_exit_status(how: str) -> None:
    code = f"import os, sys\nprint('ran', flush=True)\nsys.stderr.write('bye\\n')\nsys.stderr.flush()\n{how}({EXIT_UNSAFE})\n"
    run = run_sandboxed(code, LIMITS)
    assert run.jail_error is None
    assert run.returncode == EXIT_UNSAFE and run.stdout == "ran\n"
    assert run.error(LIMITS) == f"exit status {EXIT_UNSAFE}: bye"


@pytest.fixture
def uid0_bwrap() -> Iterator[str]:
    """A real bwrap behind a wrapper that makes the jail's uid 0 (the bootstrap must refuse before the marker)."""
    real = shutil.which("bwrap")
    assert real is not None, "make setup installs bubblewrap"
    path = Path(tempfile.mkdtemp(prefix="streamgrpo-bwrap-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    path.chmod(0o755)
    script = path / "bwrap"
    script.write_text(f'#!/bin/sh\nexec {real} --uid 0 --gid 0 "$@"\n')
    script.chmod(0o755)
    yield str(script)
    shutil.rmtree(path, ignore_errors=True)


def test_the_jails_own_refusal_with_status_121_is_still_a_start_failure(uid0_bwrap: str) -> None:
    limits = LIMITS.model_copy(update={"bwrap": uid0_bwrap})
    run = run_sandboxed("print('ran anyway')", limits, plan=plan_jail(limits))
    assert run.returncode == EXIT_UNSAFE and "ran anyway" not in run.stdout
    assert run.jail_error is not None and "refusing to run as uid 0" in run.jail_error
    assert (run.error(limits) or "").startswith("the sandbox could not start, the program did not run")


# x86_64 numbers (asm/unistd_64.h); aarch64 has none of these syscalls.
LEGACY = {"modify_ldt": (154, "0, 0, 0"), "uselib": (134, "0"), "ustat": (136, "0, 0"), "sysfs": (139, "3"),
          "_sysctl": (156, "0"), "iopl": (172, "0"), "ioperm": (173, "0, 1, 0")}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the legacy syscalls exist on x86_64 only")
def test_legacy_syscalls_fail_with_eperm_in_the_jail() -> None:
    calls = "".join(f"print({name!r}, call({nr}, {args}))\n" for name, (nr, args) in LEGACY.items())
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
            "def call(nr, *args):\n    ctypes.set_errno(0)\n    rc = libc.syscall(nr, *[ctypes.c_long(a) for a in args])\n"
            "    return ctypes.get_errno() if rc < 0 else 'allowed'\n" + calls)
    run = run_sandboxed(code, LIMITS)
    assert run.returncode == 0, run.stderr
    got = dict(line.split() for line in run.stdout.splitlines())
    assert got == dict.fromkeys(LEGACY, str(errno.EPERM))
