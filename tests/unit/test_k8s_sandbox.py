"""The rollout pods can start with their default tools: what the tools probe for, read from the code, is what
the image recipe and the manifests provide.

- the tools the pods enable: the built ConfigMap's [rollout] settings (the default list when unset); when the
  python tool is among them, its bubblewrap jail is needed;
- system packages: the Makefile's SYSTEM_PACKAGES (what `make setup` installs for the jail) must all be installed
  by the image's runtime stage, whose Debian release ships a bubblewrap at least the jail's MIN_BWRAP;
- kernel features: the namespaces and mount operations of the jail's own command line
  (:func:`~streamgrpo.sandbox.jail.bwrap_argv`) need unshare/clone, mount, umount2, pivot_root and
  sethostname; the rollout pods' seccomp profile must allow them, their AppArmor profile must allow mount,
  umount, pivot_root and user namespaces, and the namespace's Pod Security level must admit both profiles.

Not covered: a real cluster (no container runtime here); the node sysctls (user.max_user_namespaces), which
k8s/README.md states.
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


@pytest.fixture(scope="module", params=["overlays/dev-cpu", "overlays/gpu"])
def objs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return _build(request.param)


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


def test_the_rollout_pods_seccomp_profile_allows_the_jail(objs: list[dict[str, Any]]) -> None:
    pod = _find(objs, "Deployment", "rollout")["spec"]["template"]["spec"]
    seccomp = pod["securityContext"]["seccompProfile"]
    assert seccomp["type"] == "Localhost", "RuntimeDefault blocks unshare/mount/pivot_root"
    profile_file = K8S / "node" / Path(seccomp["localhostProfile"]).name
    profile = json.loads(profile_file.read_text())
    denied = {n for rule in profile["syscalls"] if rule["action"] != "SCMP_ACT_ALLOW" for n in rule["names"]}
    allowed = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" for n in rule["names"]}
    need = required_syscalls()
    assert not need & denied
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW" or need <= allowed
    assert {"bpf", "kexec_load", "init_module", "setns", "ptrace"} <= denied  # still RuntimeDefault's denials


def test_the_rollout_pods_apparmor_profile_allows_the_jail(objs: list[dict[str, Any]]) -> None:
    tmpl = _find(objs, "Deployment", "rollout")["spec"]["template"]
    ann = tmpl["metadata"].get("annotations", {})
    text = (K8S / "node" / "streamgrpo-sandbox.apparmor").read_text()
    name = re.search(r"^profile (\S+)", text, re.M)
    assert name
    for c in tmpl["spec"]["containers"]:
        assert ann.get(f"container.apparmor.security.beta.kubernetes.io/{c['name']}") == f"localhost/{name.group(1)}"
    rules = {ln.strip().rstrip(",") for ln in text.splitlines()}
    assert {"mount", "umount", "pivot_root", "userns", "capability sys_admin"} <= rules


def test_the_namespace_pod_security_level_admits_the_rollout_pods(objs: list[dict[str, Any]]) -> None:
    level = _find(objs, "Namespace", "streamgrpo")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
    assert level in PSS_SECCOMP
    for d in (o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "rollout"):
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
