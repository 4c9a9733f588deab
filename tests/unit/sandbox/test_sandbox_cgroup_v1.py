"""Where no cgroup v2 is delegated, a call is bounded by a cgroup of its own in the cgroup v1 memory, pids (and cpu)
hierarchies (issue 38, finding 17: the limits were per process on these machines). Real bubblewrap jails, real
cgroup v1 directories (this host mounts them: ``mount | grep cgroup``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.jail import plan_jail
from streamgrpo.sandbox.runner import prepare_jail, run_sandboxed
from streamgrpo.sandbox.sandbox_cgroup import OVERHEAD_MB, CgroupPlan, plan_cgroup

HOG = SandboxSettings(cgroup="v1", allow_fork=True, memory_mb=128, disk_mb=1, cpu_seconds=20, wall_seconds=60,
                      audit_hook=False)
# four children of 80 MiB each: every one within its own RLIMIT_AS of 128 MiB, 320 MiB together against the call's
# 128 + 1 + OVERHEAD_MB
FORKING_HOG = ("import os, time\nkids = []\nfor i in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
               "        x = bytearray(80 * 2 ** 20)\n        for j in range(0, len(x), 4096):\n            x[j] = 1\n"
               "        time.sleep(3)\n        os._exit(0)\n    kids.append(pid)\n"
               "print(sorted(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids))\n")


def _ours(plan: CgroupPlan) -> list[Path]:
    """This process's call cgroups left in the plan's hierarchies."""
    return [d for _, parent in plan.v1 for d in parent.iterdir() if d.name.startswith(f"sbx-{os.getpid()}-")]


def test_a_forking_memory_hog_is_killed_by_the_calls_v1_memory_limit() -> None:
    plan = prepare_jail(HOG)
    assert plan.cgroup is not None and dict(plan.cgroup.v1).keys() == {"memory", "pids", "cpu"}
    run = run_sandboxed(FORKING_HOG, HOG, plan)
    assert run.limit_hit == "memory", (run.stdout, run.stderr)
    assert run.error(HOG) == "killed: memory limit of 128 MiB (plus 1 MiB of files) exceeded"
    assert "-9" in run.stdout  # the kernel's OOM killer took at least one child (SIGKILL)
    assert _ours(plan.cgroup) == []  # every call cgroup removed after the call
    calm = run_sandboxed("import os\nprint(os.getpid(), 6 * 7)", HOG, plan)
    assert (calm.error(HOG), calm.stdout.split()[-1]) == (None, "42")


def test_auto_uses_cgroup_v1_where_no_v2_is_delegated() -> None:
    auto = SandboxSettings(allow_fork=True)
    found = plan_cgroup(auto)
    v2 = plan_cgroup(auto.model_copy(update={"cgroup": "v2"}))
    v1 = plan_cgroup(auto.model_copy(update={"cgroup": "v1"}))
    assert isinstance(v1, CgroupPlan), v1  # this host: cgroup v1 memory, pids and cpu, writable
    assert found == (v2 if isinstance(v2, CgroupPlan) else v1)


def test_a_v1_limit_the_kernel_does_not_take_as_written_fails_the_call() -> None:
    plan = prepare_jail(HOG)
    assert plan.cgroup is not None
    odd = dataclasses.replace(plan.cgroup, values=(("memory.limit_in_bytes", "1000001"),))  # not a page multiple
    run = run_sandboxed("print('ran')", HOG, dataclasses.replace(plan, cgroup=odd))
    assert run.jail_error is not None and "memory.limit_in_bytes reads" in run.jail_error
    assert "ran" not in run.stdout and _ours(plan.cgroup) == []


def test_an_explicit_v1_without_the_hierarchies_fails_closed() -> None:
    # imported here: the other tests also run on code without it
    from streamgrpo.sandbox.sandbox_cgroup_v1 import plan_v1

    assert plan_v1(("memory", "pids"), "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n", "0::/\n") \
        == "no cgroup v1 hierarchy mounts the memory, pids controller(s)"
    assert plan_jail(HOG).cgroup is None  # planned by prepare_jail only, once verified


def test_v1_mounts_values_and_own_cgroups_are_read_from_proc_text() -> None:
    from streamgrpo.sandbox.sandbox_cgroup_v1 import own_v1_cgroups, v1_mounts, v1_values

    mountinfo = ("35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                 "32 31 0:29 /kube /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                 "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    assert v1_mounts(mountinfo) == {"memory": (Path("/sys/fs/cgroup/memory"), "/"),
                                    "cpu": (Path("/sys/fs/cgroup/cpu,cpuacct"), "/kube"),
                                    "cpuacct": (Path("/sys/fs/cgroup/cpu,cpuacct"), "/kube")}
    assert own_v1_cgroups("8:pids:/\n4:memory:/a/b\n2:cpu,cpuacct:/kube/x\n0::/\n") == {
        "pids": "/", "memory": "/a/b", "cpu": "/kube/x", "cpuacct": "/kube/x"}
    values = dict(v1_values(SandboxSettings(memory_mb=256, disk_mb=8, max_processes=16, allow_fork=True,
                                            cpu_seconds=5, wall_seconds=10), OVERHEAD_MB))
    assert values == {"memory.limit_in_bytes": str((256 + 8 + OVERHEAD_MB) << 20),
                      "memory.memsw.limit_in_bytes": str((256 + 8 + OVERHEAD_MB) << 20), "pids.max": "17",
                      "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"}


@pytest.mark.parametrize("setting", ["v1", "v2"])
def test_the_cgroup_setting_names_its_versions(setting: str) -> None:
    assert SandboxSettings(cgroup=setting).cgroup == setting  # type: ignore[arg-type]
