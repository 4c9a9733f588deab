"""Build and validate every kustomize overlay of k8s/ without a cluster (``make k8s-validate``).

Steps, for ``k8s/base`` and every directory under ``k8s/overlays/`` (or the paths given):

1. ``k8s/base/topics`` is regenerated in memory from the topic catalog and compared with the
   checked-in files (drift = error).
2. The kustomization is built with ``kubectl kustomize`` when kubectl is on PATH, else with the
   Python subset builder of ``tools/kbuild.py``. ``--builder python`` forces the fallback,
   ``--compare`` builds with both and fails if they differ (needs kubectl).
3. Every object is checked (``tools/kchecks.py``: structure, images pinned, resources, probes,
   security context, references, selectors, autoscaling vs. partitions, Strimzi invariants), core
   kinds are round-tripped through the ``kubernetes`` client models and streamgrpo's settings
   are loaded with each container's environment (``tools/kmodels.py``).
4. Third-party kustomizations (``k8s/third-party/*``) reference remote, version-pinned
   manifests: they are not built (no network here) but each remote URL must carry an exact
   version and no ``latest``.

Exit status 0 when everything passes, 1 otherwise; every finding is printed.
What is not covered: anything a cluster decides (admission, CRD schemas, scheduling, RBAC).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

K8S = Path(__file__).resolve().parent
sys.path.insert(0, str(K8S / "tools"))

import kbuild  # noqa: E402
import kchecks  # noqa: E402
import kmodels  # noqa: E402

PINNED_URL = re.compile(r"/(v?\d+\.\d+\.\d+)/")


def default_targets() -> list[Path]:
    overlays = sorted(p for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").is_file())
    return [K8S / "base", *overlays]


def validate_objects(objs: list[kchecks.Obj]) -> tuple[list[kchecks.Finding], list[str]]:
    """All checks on one build: (findings, notes about checks that were skipped)."""
    findings = kchecks.run_all(objs)
    api, notes1 = kmodels.check_api_models(objs)
    cfg, notes2 = kmodels.check_streamgrpo(objs)
    return findings + api + cfg, notes1 + notes2


def _canonical(objs: list[kchecks.Obj]) -> dict[tuple, kchecks.Obj]:
    return {(o.get("kind"), (o.get("metadata") or {}).get("namespace"), (o.get("metadata") or {}).get("name")): o
            for o in objs}


def compare_builders(root: Path) -> list[str]:
    """Differences between ``kubectl kustomize`` and the Python builder (empty = identical)."""
    a, b = _canonical(kbuild.build_kubectl(root)), _canonical(kbuild.build_python(root))
    out = [f"only kubectl builds {k}" for k in a.keys() - b.keys()]
    out += [f"only the Python builder builds {k}" for k in b.keys() - a.keys()]
    out += [f"{k} differs between kubectl and the Python builder" for k in a.keys() & b.keys() if a[k] != b[k]]
    return out


def check_third_party(root: Path = K8S / "third-party") -> list[str]:
    """Remote resources of third-party kustomizations must be pinned to an exact version."""
    problems = []
    for kfile in sorted(root.glob("*/kustomization.yaml")):
        for res in kbuild.load_docs(kfile)[0].get("resources") or []:
            res = str(res)
            if "://" in res and ("latest" in res or not PINNED_URL.search(res)):
                problems.append(f"{kfile.relative_to(K8S)}: {res} is not pinned to an exact version")
    return problems


def topics_drift() -> list[str]:
    try:
        sys.path.insert(0, str(K8S))
        import gen_topics
    except ModuleNotFoundError as exc:
        return [f"cannot import the topic catalog ({exc}); install the project first"]
    return [f"k8s/base/topics/{p} differs from the catalog (run `python k8s/gen_topics.py`)" for p in gen_topics.diff()]


def validate_target(root: Path, builder: str, compare: bool) -> tuple[bool, list[str]]:
    """Build + check one kustomization; returns (ok, report lines)."""
    lines: list[str] = []
    try:
        objs, used = kbuild.build(root, builder)
    except kbuild.BuildError as exc:
        return False, [f"  BUILD FAILED: {exc}"]
    findings, notes = validate_objects(objs)
    kinds = sorted({str(o.get("kind")) for o in objs})
    lines.append(f"  built with {used}: {len(objs)} objects ({', '.join(kinds)})")
    lines += [f"  note: {n}" for n in notes]
    lines += [f"  ERROR {f}" for f in findings]
    ok = not findings
    if compare:
        try:
            diffs = compare_builders(root)
        except kbuild.BuildError as exc:
            diffs = [str(exc)]
        lines += [f"  ERROR builder mismatch: {d}" for d in diffs]
        lines.append("  kubectl and the Python builder agree" if not diffs else "")
        ok = ok and not diffs
    return ok, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build and validate the kustomize overlays of k8s/.")
    parser.add_argument("targets", nargs="*", type=Path, help="kustomization directories (default: base + overlays)")
    parser.add_argument("--builder", choices=["auto", "kubectl", "python"], default="auto",
                        help="auto: kubectl when installed, else the Python subset builder")
    parser.add_argument("--compare", action="store_true", help="also build with both builders and compare")
    parser.add_argument("--skip-topics", action="store_true", help="skip the topic-catalog drift check")
    args = parser.parse_args(argv)
    ok = True
    if not args.skip_topics:
        drift = topics_drift()
        print("topics: " + ("in sync with the catalog" if not drift else "DRIFT"))
        for d in drift:
            print(f"  ERROR {d}")
        ok = not drift
    third = check_third_party()
    print("third-party: " + ("remote manifests pinned" if not third else "UNPINNED"))
    for t in third:
        print(f"  ERROR {t}")
    ok = ok and not third
    for root in args.targets or default_targets():
        print(f"{root.relative_to(K8S.parent) if root.is_absolute() and K8S.parent in root.parents else root}:")
        target_ok, lines = validate_target(root.resolve(), args.builder, args.compare)
        print("\n".join(line for line in lines if line))
        ok = ok and target_ok
    print("k8s-validate: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
