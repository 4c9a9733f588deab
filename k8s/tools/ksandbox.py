"""The python tool's jail can start wherever it is built: the sandbox profiles on the pods, and on the nodes.

- every streamgrpo container that builds the agent's tools (``rollout``, ``evaluator``, ``serve``) and enables the
  python tool (or a stdio MCP server with ``jail`` other than ``off``) runs under the sandbox's seccomp profile
  (Localhost :data:`SECCOMP_PROFILE`) and AppArmor profile (``localhost/<name>``, annotation or securityContext
  field): the runtime's defaults block the clone/unshare/mount/pivot_root calls bubblewrap makes, and the worker
  would exit at start (status 78) with the jail's error;
- the node installer (``k8s/node``: ConfigMap ``sandbox-profiles`` and the DaemonSet that mounts it) ships
  exactly the checked-in profile files, writes the seccomp file where the kubelet resolves :data:`SECCOMP_PROFILE`
  (its seccomp root, ``/var/lib/kubelet/seccomp``), and its AppArmor file defines the profile the pods name.

What is not covered: whether the profiles are loaded on a real node (the DaemonSet's readiness probe says so per
node), AppArmor rule semantics (no AppArmor kernel here), a kubelet whose ``--root-dir`` is not the default.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kchecks import Finding, Obj, pod_template, ref

NODE = Path(__file__).resolve().parents[1] / "node"
SECCOMP_FILE = "streamgrpo-sandbox.seccomp.json"
APPARMOR_FILE = "streamgrpo-sandbox.apparmor"
#: The pods' Localhost seccomp profile, relative to the kubelet's seccomp root.
SECCOMP_PROFILE = f"profiles/{SECCOMP_FILE}"
KUBELET_SECCOMP_ROOT = "/var/lib/kubelet/seccomp"
#: first CLI argument of a streamgrpo container that builds the agent's tools from [rollout.tools].
TOOL_COMMANDS = ("rollout", "evaluator", "serve")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
INSTALLER_CONFIGMAP = "sandbox-profiles"


def apparmor_profile_name(text: str | None = None) -> str:
    """The name the AppArmor file defines (``profile <name> ...``)."""
    text = (NODE / APPARMOR_FILE).read_text() if text is None else text
    m = re.search(r"^profile\s+(\S+)", text, re.M)
    return m.group(1) if m else ""


def needs_jail(cfg: Any) -> bool:
    """True when these [rollout] settings build a bubblewrap jail at start (python tool, jailed stdio MCP server)."""
    tools = cfg.tools
    return "python" in tools.enabled or any(s.command and s.jail != "off" for s in tools.mcp_servers)


def _seccomp(pod: Obj, c: Obj) -> dict[str, Any]:
    return ((c.get("securityContext") or {}).get("seccompProfile")
            or ((pod.get("spec") or {}).get("securityContext") or {}).get("seccompProfile") or {})


def _apparmor(pod: Obj, c: Obj) -> str | None:
    """The container's AppArmor profile as the annotation writes it (``localhost/x``, ``runtime/default``...)."""
    field = ((c.get("securityContext") or {}).get("appArmorProfile")
             or ((pod.get("spec") or {}).get("securityContext") or {}).get("appArmorProfile"))
    if field:
        kind = field.get("type")
        return f"localhost/{field.get('localhostProfile')}" if kind == "Localhost" else str(kind)
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(APPARMOR_ANNOTATION + str(c.get("name")))


def check_pods(pairs: list[tuple[Obj, Obj]], loaded: dict[tuple[int, str], Any]) -> list[Finding]:
    """Every container that builds the jail carries both sandbox profiles."""
    out: list[Finding] = []
    apparmor = f"localhost/{apparmor_profile_name()}"
    for w, c in pairs:
        command = str((c.get("args") or [""])[0])
        cfg = loaded.get((id(c), "rollout"))
        if command not in TOOL_COMMANDS or cfg is None or not needs_jail(cfg):
            continue
        pod = pod_template(w)
        what = f"container {c['name']!r} ({command}) builds the python tool's bubblewrap jail"
        seccomp = _seccomp(pod, c)
        if seccomp.get("type") != "Localhost" or seccomp.get("localhostProfile") != SECCOMP_PROFILE:
            shown = seccomp.get("localhostProfile") or seccomp.get("type") or "unset (the runtime's default)"
            out.append(Finding(ref(w), f"{what} but runs under seccomp {shown}: the runtime's default blocks its "
                                       f"clone/unshare/mount/pivot_root; use Localhost {SECCOMP_PROFILE} (k8s/node), "
                                       "or leave python out of [rollout.tools] enabled"))
        got = _apparmor(pod, c)
        if got != apparmor:
            out.append(Finding(ref(w), f"{what} but its AppArmor profile is {got or 'unset (the runtime default)'}: "
                                       f"the default denies mount and pivot_root; name {apparmor} (k8s/node)"))
    return out


def check_installer(objs: list[Obj]) -> list[Finding]:
    """The node installer's build ships the checked-in profiles where the pods' names resolve."""
    sets = [o for o in objs if o.get("kind") == "DaemonSet"
            and any(v.get("configMap", {}).get("name", "").startswith(INSTALLER_CONFIGMAP)
                    for v in (pod_template(o).get("spec") or {}).get("volumes") or [])]
    if not sets:
        return [Finding("k8s/node", f"no DaemonSet mounts the ConfigMap {INSTALLER_CONFIGMAP}: nothing installs the "
                                    "sandbox profiles the pods name")]
    out: list[Finding] = []
    for ds in sets:
        spec = pod_template(ds).get("spec") or {}
        vols = {v["name"]: v for v in spec.get("volumes") or []}
        cm_name = next(v["configMap"]["name"] for v in vols.values() if "configMap" in v
                       and v["configMap"]["name"].startswith(INSTALLER_CONFIGMAP))
        cm = next((o for o in objs if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == cm_name), None)
        data = (cm or {}).get("data") or {}
        for name in (SECCOMP_FILE, APPARMOR_FILE):
            if data.get(name) != (NODE / name).read_text():
                out.append(Finding(ref(ds), f"ConfigMap {cm_name} does not carry k8s/node/{name} as checked in"))
        if apparmor_profile_name(data.get(APPARMOR_FILE, "")) != apparmor_profile_name():
            out.append(Finding(ref(ds), "the installed AppArmor file does not define the profile the pods name"))
        for c in spec.get("containers") or []:
            env = {e["name"]: e.get("value") for e in c.get("env") or []}
            mounts = {m["mountPath"]: vols.get(m["name"], {}) for m in c.get("volumeMounts") or []}
            target = str(env.get("SECCOMP_DIR", ""))
            host = next((str(v["hostPath"]["path"]).rstrip("/") + target[len(p):] for p, v in mounts.items()
                         if "hostPath" in v and (target == p or target.startswith(p.rstrip("/") + "/"))), None)
            want = f"{KUBELET_SECCOMP_ROOT}/{Path(SECCOMP_PROFILE).parent}"
            if host != want:
                out.append(Finding(ref(ds), f"container {c['name']!r} writes the seccomp profile to {host!r} on the "
                                            f"node, not {want!r}, where the kubelet resolves Localhost "
                                            f"{SECCOMP_PROFILE}"))
    return out
