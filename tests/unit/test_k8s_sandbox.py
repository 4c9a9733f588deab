"""The pods that build the default tools (rollout, evaluator, mcp) can start: what the tools probe for, read from the
code, is what the image recipe and the manifests provide, and the node installer (k8s/node) installs the profiles
they name.

- the tools the pods enable: the built ConfigMap's [rollout] settings (the default list when unset); when the
  python tool is among them, its bubblewrap jail is needed;
- system packages: the Makefile's SYSTEM_PACKAGES (what `make setup` installs for the jail) must all be installed
  by the image's runtime stage, whose Debian release ships a bubblewrap at least the jail's MIN_BWRAP;
- kernel features: the namespaces and mount operations of the jail's own command line
  (:func:`~streamgrpo.sandbox.jail.bwrap_argv`) need unshare/clone, mount, umount2, pivot_root and
  sethostname; the pods' seccomp profile is RuntimeDefault's allow list plus exactly those (k8s/node/gen_seccomp.py),
  their AppArmor profile allows mount, umount, pivot_root and user namespaces, and the namespace's Pod Security level
  admits both profiles;
- the installer: k8s/node's DaemonSet ships the checked-in files where the pods' Localhost names resolve.

Not covered: a real cluster; the node sysctls (user.max_user_namespaces), which k8s/README.md states. The slow
tests/e2e/test_image_container.py runs the jail in a real container under the shipped seccomp profile.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import tomllib

from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.sandbox import jail

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
#: bubblewrap shipped by the Debian release of a python:<v>-slim-<release> image.
DEBIAN_BWRAP = {"bookworm": (0, 8, 0), "trixie": (0, 11, 0)}
#: Pod Security Standards: the AppArmor and seccomp values each level admits (kubernetes.io/docs/concepts/security/
#: pod-security-standards); both levels forbid Unconfined.
PSS_SECCOMP = {"baseline": {None, "RuntimeDefault", "Localhost"}, "restricted": {"RuntimeDefault", "Localhost"}}
PSS_BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                     "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def _build(target: str) -> list[dict[str, Any]]:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("k8s_validate_sandbox", K8S / "validate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["k8s_validate_sandbox"] = module
    spec.loader.exec_module(module)
    return list(module.build(K8S / target))


@pytest.fixture(scope="module", params=["base", "overlays/dev-cpu", "overlays/gpu"])
def objs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return _build(request.param)


#: The Deployments whose containers build the agent's tools from [rollout.tools] (rollout, evaluator, serve).
TOOL_BUILDERS = ("rollout", "evaluator", "mcp")


def _gen_seccomp() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("k8s_gen_seccomp_test", K8S / "node" / "gen_seccomp.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def _pod_tools(objs: list[dict[str, Any]]) -> list[str]:
    toml = tomllib.loads(_find(objs, "ConfigMap", "streamgrpo-config")["data"]["streamgrpo.toml"])
    return RolloutConfig(**toml.get("rollout", {})).tools.enabled


def system_packages() -> list[str]:
    m = re.search(r"^SYSTEM_PACKAGES\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, "the Makefile names the sandbox's Debian packages in SYSTEM_PACKAGES"
    return m.group(1).split()


def runtime_stage() -> str:
    """The Dockerfile's last stage (what the pods run), continuation lines joined."""
    text = (K8S / "image" / "Dockerfile").read_text().replace("\\\n", " ")
    return text[text.rindex("\nFROM "):]


def apt_installed(stage: str) -> set[str]:
    out: set[str] = set()
    for m in re.finditer(r"apt-get install ([^&\n]+)", stage):
        out |= {w for w in m.group(1).split() if not w.startswith("-")}
    return out


def required_syscalls() -> set[str]:
    """Syscalls bubblewrap makes for the jail's own command line."""
    plan = jail.JailPlan(bwrap="/usr/bin/bwrap", uid=10001, gid=10001, switch_user=False, python="/usr/bin/python3",
                         python_dirs=(), seccomp=b"")
    argv = jail.bwrap_argv(plan, RolloutConfig().tools.sandbox, jail.JailFds(3, 4, 5), "x")
    unshares = {a.removeprefix("--unshare-") for a in argv if a.startswith("--unshare-")}
    assert {"user", *jail.NAMESPACES} - {"mnt"} <= unshares  # the probe checks each of these namespaces
    need = {"unshare", "clone"}  # new namespaces
    need |= {"mount", "umount2", "pivot_root"}  # bwrap always builds its own root in a mount namespace
    if "--hostname" in argv:
        need.add("sethostname")
    return need


def test_the_default_rollout_pods_need_the_jail(objs: list[dict[str, Any]]) -> None:
    assert "python" in _pod_tools(objs), "the pods no longer enable the python tool: revisit this test"


def test_the_image_installs_what_the_jail_probes_for() -> None:
    stage = runtime_stage()
    missing = set(system_packages()) - apt_installed(stage)
    assert not missing, f"k8s/image/Dockerfile's runtime stage does not install {sorted(missing)}"
    image = re.search(r"ARG PYTHON_IMAGE=\S+-slim-(\w+)", (K8S / "image" / "Dockerfile").read_text())
    assert image and DEBIAN_BWRAP.get(image.group(1), ()) >= jail.MIN_BWRAP


@pytest.mark.parametrize("deployment", TOOL_BUILDERS)
def test_the_tool_pods_seccomp_profile_is_runtime_default_plus_what_the_jail_needs(
        objs: list[dict[str, Any]], deployment: str) -> None:
    dep = _find(objs, "Deployment", deployment)
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"][0] in ("rollout", "evaluator", "serve")
    seccomp = dep["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]
    assert seccomp["type"] == "Localhost", "RuntimeDefault blocks unshare/mount/pivot_root"
    profile_file = K8S / "node" / Path(seccomp["localhostProfile"]).name
    profile = json.loads(profile_file.read_text())
    gen = _gen_seccomp()
    assert profile == gen.profile(), "run `python k8s/node/gen_seccomp.py`"
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"  # an allow list, not default-allow with denials
    allowed = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" for n in rule["names"]}
    assert allowed == gen.allowed()
    # exactly what bubblewrap needs on top of RuntimeDefault, read from the jail's own command line
    assert allowed - gen.runtime_default() == required_syscalls() - {"clone"} == {
        "unshare", "mount", "umount2", "pivot_root", "sethostname"}
    assert "clone" in required_syscalls() and not [r for r in profile["syscalls"] if "clone" in r["names"]
                                                    and r.get("args")]  # namespace flags: unfiltered
    assert {"bpf", "kexec_load", "init_module", "setns", "chroot", "keyctl", "add_key", "perf_event_open",
            "open_by_handle_at", "io_uring_setup", "userfaultfd", "fsopen", "move_mount"}.isdisjoint(allowed)
    clone3 = next(r for r in profile["syscalls"] if r["names"] == ["clone3"])
    assert (clone3["action"], clone3["errnoRet"]) == ("SCMP_ACT_ERRNO", 38)  # ENOSYS, as RuntimeDefault


def test_runtime_default_data_is_containerds_list() -> None:
    """Spot checks of the RuntimeDefault data against containerd's DefaultProfile (capability-gated calls are out)."""
    gen = _gen_seccomp()
    rd = gen.runtime_default()
    assert {"read", "write", "openat", "execve", "seccomp", "prctl", "capset", "setresuid", "ptrace",
            "name_to_handle_at", "memfd_create", "arch_prctl"} <= rd
    assert {"mount", "umount2", "unshare", "pivot_root", "sethostname", "setns", "bpf", "chroot", "reboot",
            "init_module", "acct", "settimeofday", "mbind", "syslog", "open_by_handle_at"}.isdisjoint(rd)
    stand_in = gen.runtime_default_profile()
    names = {n for r in stand_in["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
    assert names == rd and not set(gen.BWRAP) - {"clone"} & names


@pytest.mark.parametrize("deployment", TOOL_BUILDERS)
def test_the_tool_pods_apparmor_profile_allows_the_jail(objs: list[dict[str, Any]], deployment: str) -> None:
    tmpl = _find(objs, "Deployment", deployment)["spec"]["template"]
    ann = tmpl["metadata"].get("annotations", {})
    text = (K8S / "node" / "streamgrpo-sandbox.apparmor").read_text()
    name = re.search(r"^profile (\S+)", text, re.M)
    assert name
    for c in tmpl["spec"]["containers"]:
        assert ann.get(f"container.apparmor.security.beta.kubernetes.io/{c['name']}") == f"localhost/{name.group(1)}"
    rules = {ln.strip().rstrip(",") for ln in text.splitlines()}
    assert {"mount", "umount", "pivot_root", "userns", "capability sys_admin"} <= rules
    # bwrap's --disable-userns writes /proc/sys/user/max_user_namespaces of its new namespace: not denied
    denied_sys = [r for r in rules if r.startswith("deny @{PROC}/sys/")]
    assert "deny @{PROC}/sys/[^k]** w" not in denied_sys and "deny @{PROC}/sys/[^ku]** w" in denied_sys


def test_the_namespace_pod_security_level_admits_the_rollout_pods(objs: list[dict[str, Any]]) -> None:
    level = _find(objs, "Namespace", "streamgrpo")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
    assert level in PSS_SECCOMP
    for d in (o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] in TOOL_BUILDERS):
        tmpl = d["spec"]["template"]
        pod = tmpl["spec"]
        assert pod["securityContext"]["seccompProfile"]["type"] in PSS_SECCOMP[level]
        for key, value in (tmpl["metadata"].get("annotations") or {}).items():
            if key.startswith("container.apparmor.security.beta.kubernetes.io/"):
                assert value == "runtime/default" or value.startswith("localhost/")
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc.get("privileged") is not True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
            assert set(sc["capabilities"].get("add") or []) <= PSS_BASELINE_CAPS
            assert (sc.get("seccompProfile") or {}).get("type") in (None, *PSS_SECCOMP[level])


# --- the node installer (k8s/node) -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def node_objs() -> list[dict[str, Any]]:
    return _build("node")


def test_the_node_installer_ships_the_profiles_the_pods_name(node_objs: list[dict[str, Any]],
                                                             objs: list[dict[str, Any]]) -> None:
    ds = _find(node_objs, "DaemonSet", "sandbox-profiles")
    spec = ds["spec"]["template"]["spec"]
    cm_name = next(v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v)
    data = _find(node_objs, "ConfigMap", cm_name)["data"]
    vols = {v["name"]: v for v in spec["volumes"]}
    c = spec["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    mounts = {m["mountPath"]: vols[m["name"]] for m in c["volumeMounts"]}
    for deployment in TOOL_BUILDERS:
        tmpl = _find(objs, "Deployment", deployment)["spec"]["template"]
        local = tmpl["spec"]["securityContext"]["seccompProfile"]["localhostProfile"]  # relative to the seccomp root
        assert data[Path(local).name] == (K8S / "node" / Path(local).name).read_text()
        assert f"/var/lib/kubelet/seccomp/{Path(local).parent}" == (
            mounts["/host/seccomp"]["hostPath"]["path"] + env["SECCOMP_DIR"].removeprefix("/host/seccomp"))
        apparmor = tmpl["metadata"]["annotations"][f"container.apparmor.security.beta.kubernetes.io/{deployment}"]
        assert re.search(rf"^profile {re.escape(apparmor.removeprefix('localhost/'))} ",
                         data["streamgrpo-sandbox.apparmor"], re.M)
    # privileged, so in its own namespace at the Pod Security level that admits it, never streamgrpo's
    assert ds["metadata"]["namespace"] != "streamgrpo"
    ns = _find(node_objs, "Namespace", ds["metadata"]["namespace"])
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert {t["operator"] for t in spec["tolerations"]} == {"Exists"}  # GPU nodes too
    assert "install-profiles.sh" in data and c["command"][-1] == "install"


def test_the_installer_script_installs_and_checks_the_seccomp_profile(tmp_path: Path,
                                                                      node_objs: list[dict[str, Any]]) -> None:
    """The script itself, on a directory standing in for the node (no AppArmor on this kernel: seccomp only)."""
    import os
    import subprocess
    import time

    data = _find(node_objs, "ConfigMap", next(o["metadata"]["name"] for o in node_objs if o["kind"] == "ConfigMap"))
    profiles, seccomp = tmp_path / "profiles", tmp_path / "node" / "profiles"
    profiles.mkdir()
    for name, text in data["data"].items():
        (profiles / name).write_text(text)
    env = {**os.environ, "PROFILES": str(profiles), "SECCOMP_DIR": str(seccomp), "APPARMOR_DIR": str(tmp_path / "aa"),
           "READY": str(tmp_path / "installed")}
    script = str(profiles / "install-profiles.sh")
    if Path("/sys/module/apparmor/parameters/enabled").is_file():
        pytest.skip("this kernel has AppArmor: the script would load a profile into it")
    assert subprocess.run(["sh", script, "check"], env=env, capture_output=True).returncode == 1
    run = subprocess.Popen(["sh", script, "install"], env={**env, "INTERVAL": "600"}, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert run.stdout is not None
        assert "installed seccomp profile" in run.stdout.readline()
        assert "AppArmor is not enabled on this node" in run.stdout.readline()
        for _ in range(100):  # then it marks itself installed (the DaemonSet's liveness probe) and sleeps
            if (tmp_path / "installed").is_file():
                break
            time.sleep(0.05)
    finally:
        run.kill()
        run.wait()
    assert (seccomp / "streamgrpo-sandbox.seccomp.json").read_text() == data["data"]["streamgrpo-sandbox.seccomp.json"]
    assert (tmp_path / "installed").is_file()  # the DaemonSet's liveness probe
    assert subprocess.run(["sh", script, "check"], env=env, capture_output=True).returncode == 0
    (seccomp / "streamgrpo-sandbox.seccomp.json").write_text("{}")  # a stale profile on the node
    assert subprocess.run(["sh", script, "check"], env=env, capture_output=True).returncode == 1


def test_the_apparmor_profile_parses_as_the_installer_loads_it(tmp_path: Path) -> None:
    """apparmor_parser (compile only, no kernel load) accepts the profile the installer loads: as shipped on
    AppArmor >= 4, without the `userns` rule on older parsers, which reject it (the installer drops it there)."""
    import shutil
    import subprocess

    parser = shutil.which("apparmor_parser") or ("/usr/sbin/apparmor_parser"
                                                 if Path("/usr/sbin/apparmor_parser").is_file() else None)
    if parser is None:
        pytest.skip("apparmor_parser is not installed (Debian: apt-get install apparmor)")
    version = subprocess.run([parser, "--version"], capture_output=True, text=True).stdout
    major = int(re.search(r"version (\d+)", version).group(1))  # type: ignore[union-attr]
    text = (K8S / "node" / "streamgrpo-sandbox.apparmor").read_text()
    script = (K8S / "node" / "install-profiles.sh").read_text()
    strip = re.search(r"sed '([^']+)'", script)
    assert strip, "the installer drops the userns rule for AppArmor < 4 with sed"
    loaded = text if major >= 4 else subprocess.run(["sed", strip.group(1)], input=text, capture_output=True,
                                                    text=True, check=True).stdout
    assert bool(re.search(r"^\s*userns,", loaded, re.M)) == (major >= 4)
    (tmp_path / "profile").write_text(loaded)
    done = subprocess.run([parser, "--skip-kernel-load", "--skip-cache", str(tmp_path / "profile")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if major < 4:
        (tmp_path / "raw").write_text(text)
        raw = subprocess.run([parser, "--skip-kernel-load", "--skip-cache", str(tmp_path / "raw")],
                             capture_output=True, text=True)
        assert raw.returncode != 0 and "syntax error" in raw.stderr  # why the installer drops it
