"""The sandbox's jail: verified when the tool is built, and it fails closed (a clear error naming what
to grant, never a silent skip) when an isolation cannot be applied."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from streamgrpo.rollout.tools.python_sandbox import PythonSandbox
from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.errors import SandboxUnavailableError
from streamgrpo.sandbox.jail import plan_jail, proc_sys_read_only, traversable
from streamgrpo.sandbox.runner import run_sandboxed, verify_jail
from streamgrpo.sandbox.seccomp import ARCHES, DENIED, SeccompUnsupportedError, build_program

ROOT_ONLY = "the worker is not root here, so the sandbox runs as the worker's own (unprivileged) uid"


def _skip_loudly(reason: str) -> None:
    warnings.warn(f"sandbox test skipped: {reason}", stacklevel=2)
    pytest.skip(reason)


def test_the_probe_sees_every_isolation_from_inside() -> None:
    settings = SandboxSettings()
    plan = plan_jail(settings)
    report = verify_jail(plan, settings)
    assert report["uid"] == report["euid"] == plan.uid != 0
    assert report["no_new_privs"] == 1 and report["seccomp_mode"] == 2 and report["capabilities"] == 0
    assert report["interfaces"] == ["lo"] and report["new_userns_blocked"] is True
    assert report["root_writable"] is False and report["proc_visible"] is False


def test_a_root_worker_runs_code_as_the_configured_unprivileged_uid() -> None:
    if os.geteuid() != 0:
        _skip_loudly(ROOT_ONLY)
    run = run_sandboxed("import os\nprint(os.getuid(), os.getgid(), os.getgroups())", SandboxSettings(run_as_uid=4242))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split(maxsplit=2)[:2] == ["4242", "4242"]


def test_missing_bubblewrap_refuses_to_build_and_says_how_to_install_it() -> None:
    with pytest.raises(SandboxUnavailableError, match=r"apt-get install bubblewrap"):
        PythonSandbox(SandboxSettings(bwrap="/nonexistent/bwrap"))


def test_an_interpreter_the_sandbox_uid_cannot_read_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        _skip_loudly(ROOT_ONLY + ": every interpreter it can run is readable by it")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python3").symlink_to("/usr/bin/python3")
    with pytest.raises(SandboxUnavailableError, match=r"uid 65534 cannot read .*private"):
        PythonSandbox(SandboxSettings(python=private / "python3"))


def test_without_user_namespaces_the_tool_refuses_to_build() -> None:
    """A real host without unprivileged user namespaces: an outer jail that disables them."""
    bwrap = shutil.which("bwrap")
    assert bwrap is not None, "make setup installs bubblewrap"
    code = "from streamgrpo.rollout.tools.python_sandbox import PythonSandbox\nPythonSandbox()\n"
    proc = subprocess.run(  # noqa: S603
        [bwrap, "--unshare-user", "--uid", "1000", "--gid", "1000", "--disable-userns", "--bind", "/", "/",
         "--dev", "/dev", "--proc", "/proc", "--", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    assert "SandboxUnavailableError: bubblewrap could not set up the sandbox" in proc.stderr
    assert "unprivileged user namespaces" in proc.stderr and "seccomp" in proc.stderr


def test_with_proc_sys_read_only_as_in_a_container_the_jail_starts_and_refuses_new_namespaces_by_seccomp() -> None:
    """Kubernetes, podman and docker mount /proc/sys read-only in every unprivileged container, where bwrap's
    --disable-userns fails (EROFS writing /proc/sys/user/max_user_namespaces) and the tool could not start in any
    pod. An outer mount namespace with /proc/sys bound read-only stands in for the container: the jail now starts
    without that flag, its probe checks that clone(CLONE_NEWUSER) is refused by the seccomp filter (with fork
    allowed, the one route it would leave), and a call runs."""
    if os.geteuid() != 0:
        _skip_loudly("the outer mount namespace is made as root here")
    bwrap = shutil.which("bwrap")
    assert bwrap is not None, "make setup installs bubblewrap"
    code = ("import json, logging, sys\nlogging.basicConfig(stream=sys.stdout, level=logging.WARNING)\n"
            "from streamgrpo.rollout.tools.python_sandbox import PythonSandbox\n"
            "from streamgrpo.sandbox.config import SandboxSettings\n"
            "tool = PythonSandbox(SandboxSettings(allow_fork=True))\n"
            "r = tool.run({'code': 'import math\\nprint(math.factorial(10))'})\n"
            "print(json.dumps({'disable_userns': tool.plan.disable_userns, 'output': r.output, 'error': r.error}))\n")
    proc = subprocess.run(  # noqa: S603
        [bwrap, "--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--ro-bind", "/proc/sys", "/proc/sys", "--",
         sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"disable_userns": False, "output": "3628800\n", "error": None}, result
    assert "bwrap's --disable-userns cannot be applied; new namespaces inside the jail are refused by its seccomp " \
           "filter alone" in proc.stdout


def test_proc_sys_read_only_reads_the_mount_table(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.write_text("22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n")
    pod = tmp_path / "pod"
    pod.write_text(host.read_text() + "633 631 0:71 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw\n")
    assert not proc_sys_read_only(str(host)) and proc_sys_read_only(str(pod))
    assert not proc_sys_read_only(str(tmp_path / "missing"))


def test_the_filter_refuses_namespace_flags_on_clone_unless_the_probe_of_disable_userns_asks() -> None:
    with_rule, without = build_program(allow_fork=True), build_program(allow_fork=True, clone_namespaces=False)
    assert len(with_rule) == len(without) + 5 * 8  # the five instructions of the clone rule
    assert build_program() != build_program(clone_namespaces=False)


def test_a_jail_that_fails_at_call_time_fails_closed() -> None:
    tool = PythonSandbox(SandboxSettings())
    tool.plan = dataclasses.replace(tool.plan, python_dirs=(*tool.plan.python_dirs, "/nonexistent-streamgrpo"))
    result = tool.run({"code": "print('ran' + ' anyway')"})
    assert result.error is not None
    assert result.error.startswith("the sandbox could not start, the program did not run: bubblewrap could not")
    assert "nonexistent-streamgrpo" in result.error
    assert "ran anyway" not in result.output


def test_traversable_follows_every_parent_directory() -> None:
    base = Path(tempfile.mkdtemp(dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        base.chmod(0o755)
        private = base / "p"
        private.mkdir(mode=0o700)
        (private / "python3").write_text("#!/bin/sh\n")
        (private / "python3").chmod(0o755)
        other = os.geteuid() + 12345
        if all(os.stat(p).st_mode & 0o005 == 0o005 for p in base.parents):
            assert not traversable(str(private / "python3"), other, other)
            private.chmod(0o711)
            assert traversable(str(private / "python3"), other, other)
            (private / "python3").chmod(0o700)
            assert not traversable(str(private / "python3"), other, other)
        assert traversable(str(private), os.geteuid(), os.getegid())
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize("machine", sorted(ARCHES))
def test_seccomp_program_covers_every_denied_syscall(machine: str) -> None:
    program = build_program(machine)
    assert len(program) % 8 == 0
    n = len(program) // 8
    assert len(DENIED) * 2 < n < 4096  # two instructions per denied syscall, under the kernel's limit
    assert set(DENIED) <= set(ARCHES[machine][1])


def test_seccomp_on_an_unknown_architecture_is_an_error() -> None:
    with pytest.raises(SeccompUnsupportedError, match="riscv64"):
        build_program("riscv64")


def test_the_bootstrap_config_round_trips() -> None:
    from streamgrpo.sandbox._sandbox_child import format_config, parse_config
    from streamgrpo.sandbox.runner import child_config

    cfg = {"workdir": "/tmp", "code_path": "/sandbox/main.py", "cpu_seconds": 5, "audit_hook": True, "probe": False}
    assert parse_config(format_config(cfg)) == {**cfg, "audit_hook": 1, "probe": 0}
    parsed = parse_config(child_config(SandboxSettings(memory_mb=300)))
    assert parsed["memory_mb"] == 300 and parsed["workdir"] == "/tmp"


def test_an_old_bubblewrap_is_refused(tmp_path: Path) -> None:
    """A real executable that answers like bubblewrap 0.6.1 (Ubuntu 22.04's), which lacks --size."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bubblewrap 0.6.1'\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailableError, match=r"bubblewrap 0\.8\.0 or newer is needed .* is 0\.6\.1"):
        plan_jail(SandboxSettings(bwrap=str(fake)))
