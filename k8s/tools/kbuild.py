"""Build a kustomization: with ``kubectl kustomize`` when it is installed, else in pure Python.

The Python builder implements only the subset of kustomize that streamgrpo's manifests use, and
refuses anything else with an error naming the unsupported field (so the manifests cannot drift
out of the subset silently):

- ``resources``: local YAML files (one or more documents) and local directories holding a
  ``kustomization.yaml``; remote URLs are refused.
- ``namespace``: set on every namespaced object (not on cluster-scoped kinds).
- ``labels``: ``pairs`` added to ``metadata.labels``; ``includeSelectors``/``includeTemplates``
  must be false (the default).
- ``images``: ``name`` -> ``newName``/``newTag``/``digest`` in every container and init container.
- ``patches``: strategic-merge patches (``path`` or inline ``patch``) matched by kind + name
  (+ namespace when the patch names one; a top-level ``$patch: delete`` removes the object),
  and JSON 6902 patches (``add``/``replace``/``remove``)
  with a ``target`` of group/version/kind/name/namespace. Strategic merge uses the merge keys of
  the built-in kinds' lists (containers and env by name, volumeMounts by mountPath, ports by
  containerPort...); other lists, and every list of a custom resource, are replaced whole, as
  kustomize does for kinds without an OpenAPI schema.

Transformers run in kustomize's order: patches, namespace, labels, images.

What is not covered: generators (configMapGenerator, secretGenerator), name prefixes/suffixes,
replacements, components, ``$patch`` directives below the top level, label selectors in patch targets. The unit tests
compare this builder with ``kubectl kustomize`` on every overlay wherever kubectl is installed.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

SUPPORTED_KEYS = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "patches"}
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "StorageClass",
    "PersistentVolume", "PriorityClass", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
}
#: list field name -> merge key, for strategic merge on built-in (non-CRD) kinds.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "env": "name", "volumeMounts": "mountPath", "ports": "containerPort", "imagePullSecrets": "name",
    "volumeDevices": "devicePath", "hostAliases": "ip",
}


class BuildError(Exception):
    """A kustomization could not be built (or uses something outside the supported subset)."""


def load_docs(path: Path) -> list[Obj]:
    """All non-empty YAML documents of ``path``; each must be a mapping."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        raise BuildError(f"{path}: not valid YAML: {exc}") from exc
    for d in docs:
        if not isinstance(d, dict):
            raise BuildError(f"{path}: every YAML document must be a mapping, got {type(d).__name__}")
    return docs


def _is_builtin(obj: Obj) -> bool:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def strategic_merge(base: Any, patch: Any, builtin: bool, field: str = "") -> Any:
    """Merge ``patch`` into ``base`` (both plain YAML values); returns a new value."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, builtin, key)
            else:
                out[key] = copy.deepcopy(value)
        return out
    key = MERGE_KEYS.get(field) if builtin else None
    if isinstance(base, list) and isinstance(patch, list) and key:
        # kustomize's order: patch-only items first (in patch order), then the base items merged.
        merged = list(base)
        index = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, dict)}
        added = []
        for item in patch:
            if isinstance(item, dict) and item.get(key) in index:
                i = index[item[key]]
                merged[i] = strategic_merge(merged[i], item, builtin)
            else:
                added.append(copy.deepcopy(item))
        return added + merged
    return copy.deepcopy(patch)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise BuildError(f"JSON patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json6902(obj: Obj, ops: list[Obj]) -> Obj:
    """Apply JSON 6902 ``add``/``replace``/``remove`` operations to a copy of ``obj``."""
    out = copy.deepcopy(obj)
    for op in ops:
        kind, parts = op.get("op"), _pointer(str(op.get("path", "")))
        if kind not in {"add", "replace", "remove"}:
            raise BuildError(f"JSON patch op {kind!r} is not supported (add, replace, remove)")
        parent: Any = out
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        if isinstance(parent, list):
            idx = len(parent) if last == "-" else int(last)
            if kind == "remove":
                parent.pop(idx)
            elif kind == "add":
                parent.insert(idx, copy.deepcopy(op["value"]))
            else:
                parent[idx] = copy.deepcopy(op["value"])
        elif kind == "remove":
            parent.pop(last)
        elif kind == "replace" and last not in parent:
            raise BuildError(f"JSON patch replace: {op['path']} does not exist in {obj['kind']}/{_name(obj)}")
        else:
            parent[last] = copy.deepcopy(op["value"])
    return out


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _matches_target(obj: Obj, target: Obj) -> bool:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    want = {"group": group, "version": version, "kind": obj.get("kind"), "name": _name(obj),
            "namespace": (obj.get("metadata") or {}).get("namespace")}
    unknown = set(target) - set(want)
    if unknown:
        raise BuildError(f"patch target fields {sorted(unknown)} are not supported by the Python builder")
    return all(want[k] == v for k, v in target.items())


def _apply_patch(objs: list[Obj], entry: Obj, root: Path) -> list[Obj]:
    if "path" in entry:
        text = (root / entry["path"]).read_text()
    elif "patch" in entry:
        text = entry["patch"]
    else:
        raise BuildError(f"{root}: a patch needs `path` or `patch`")
    body = yaml.safe_load(text)
    if isinstance(body, list):  # JSON 6902
        if "target" not in entry:
            raise BuildError(f"{root}: a JSON 6902 patch needs a `target`")
        hits = [i for i, o in enumerate(objs) if _matches_target(o, entry["target"])]
        if not hits:
            raise BuildError(f"{root}: patch target {entry['target']} matches nothing")
        return [json6902(o, body) if i in hits else o for i, o in enumerate(objs)]
    if not isinstance(body, dict) or "kind" not in body:
        raise BuildError(f"{root}: strategic-merge patch {entry.get('path', '<inline>')} needs kind and metadata.name")
    pns = (body.get("metadata") or {}).get("namespace")
    out, hit = [], False
    for o in objs:
        same = o.get("kind") == body["kind"] and _name(o) == _name(body)
        if same and pns is not None:
            same = (o.get("metadata") or {}).get("namespace") == pns
        if same:
            hit = True
            if body.get("$patch") == "delete":
                continue  # the whole object is removed
            o = strategic_merge(o, body, _is_builtin(o))
        out.append(o)
    if not hit:
        raise BuildError(f"{root}: patch {entry.get('path', '<inline>')} ({body['kind']}/{_name(body)}) matches nothing")
    return out


def _set_image(container: Obj, images: list[Obj]) -> None:
    image = str(container.get("image", ""))
    ref, _, digest = image.partition("@")
    name, tag = ref, ""
    if ":" in ref.rsplit("/", 1)[-1]:
        name, _, tag = ref.rpartition(":")
    for rule in images:
        if rule.get("name") != name:
            continue
        new_name = rule.get("newName", name)
        if "digest" in rule:
            container["image"] = f"{new_name}@{rule['digest']}"
        else:
            new_tag = str(rule["newTag"]) if "newTag" in rule else tag
            container["image"] = new_name + (f":{new_tag}" if new_tag else "") + (f"@{digest}" if digest else "")
        return


def pod_specs(obj: Obj) -> list[Obj]:
    """The pod spec(s) inside a workload object (Pod, Deployment, Job, CronJob...)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return [spec]
    if obj.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    tmpl = (spec.get("template") or {}).get("spec")
    return [tmpl] if isinstance(tmpl, dict) else []


def _transform(objs: list[Obj], kust: Obj) -> list[Obj]:
    ns = kust.get("namespace")
    for o in objs:
        meta = o.setdefault("metadata", {})
        if ns and o.get("kind") not in CLUSTER_SCOPED:
            meta["namespace"] = ns
        for spec in kust.get("labels") or []:
            if spec.get("includeSelectors") or spec.get("includeTemplates"):
                raise BuildError("labels with includeSelectors/includeTemplates are not supported by the Python builder")
            meta.setdefault("labels", {}).update({k: str(v) for k, v in (spec.get("pairs") or {}).items()})
        for pod in pod_specs(o):
            for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
                _set_image(c, kust.get("images") or [])
    return objs


def build_python(root: Path) -> list[Obj]:
    """Build the kustomization in directory ``root`` with the Python subset builder."""
    kfile = root / "kustomization.yaml"
    if not kfile.is_file():
        raise BuildError(f"{root} has no kustomization.yaml")
    kust = load_docs(kfile)[0]
    unsupported = set(kust) - SUPPORTED_KEYS
    if unsupported:
        raise BuildError(f"{kfile}: {sorted(unsupported)} not supported by the Python builder (use kubectl)")
    objs: list[Obj] = []
    for res in kust.get("resources") or []:
        if "://" in str(res):
            raise BuildError(f"{kfile}: remote resource {res} cannot be built offline")
        path = (root / res).resolve()
        objs.extend(build_python(path) if path.is_dir() else load_docs(path))
    for entry in kust.get("patches") or []:
        objs = _apply_patch(objs, entry, root)
    return _transform(objs, kust)


def kubectl_available() -> bool:
    return shutil.which("kubectl") is not None


def build_kubectl(root: Path, timeout_s: float = 120.0) -> list[Obj]:
    """Build with ``kubectl kustomize`` (the real kustomize embedded in kubectl)."""
    try:
        res = subprocess.run(["kubectl", "kustomize", str(root)], capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"kubectl kustomize {root} failed to run: {exc}") from exc
    if res.returncode != 0:
        raise BuildError(f"kubectl kustomize {root} failed: {res.stderr.strip()}")
    return [d for d in yaml.safe_load_all(res.stdout) if d is not None]


def build(root: Path, builder: str = "auto") -> tuple[list[Obj], str]:
    """Build ``root`` with ``builder`` in {"auto", "kubectl", "python"}; returns (objects, builder used)."""
    if builder == "kubectl" or (builder == "auto" and kubectl_available()):
        return build_kubectl(root), "kubectl"
    if builder in {"auto", "python"}:
        return build_python(root), "python"
    raise BuildError(f"unknown builder {builder!r}; use auto, kubectl or python")
