"""Schema validation of every object of a build, offline.

- Kubernetes' own kinds: ``kubernetes-validate`` (the upstream OpenAPI schemas, **strict**: an
  unknown field such as a misspelt ``readinessProb`` is an error) against every version in
  :data:`K8S_VERSIONS` (the oldest Kubernetes the README supports and the newest the package ships).
- Custom resources (Strimzi, KEDA, prometheus-operator): the minimal JSON Schemas of
  ``k8s/schemas/`` (see its README), with ``jsonschema``.
- A kind with neither is an error: every object of a build is validated by something.

What is not covered: admission (defaults, immutability, webhooks, what operators decide), which
``kubectl apply --dry-run=server`` on a cluster checks.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import yaml
from kchecks import Finding, Obj, ref

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
K8S_VERSIONS = ("1.25.0", "1.37.0")


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> JSON Schema, with the shared ``$defs`` merged in."""
    defs = yaml.safe_load((SCHEMAS / "_defs.yaml").read_text())
    out = {}
    for path in sorted(SCHEMAS.glob("[!_]*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            schema = dict(doc["schema"])
            schema["$defs"] = {**defs, **schema.get("$defs", {})}
            out[(doc["apiVersion"], doc["kind"])] = schema
    return out


def _where(error: Any) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(root)"


def validate_crd(obj: Obj) -> list[Finding] | None:
    """Findings of one custom resource, or None when no schema here describes it."""
    import jsonschema

    schema = crd_schemas().get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    if schema is None:
        return None
    validator = jsonschema.Draft202012Validator(schema)
    return [Finding(ref(obj), f"schema k8s/schemas ({obj['apiVersion']}): {_where(e)}: {e.message}")
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]


def validate_core(obj: Obj) -> list[Finding] | None:
    """Findings of one built-in object against every K8S_VERSIONS schema, or None if it is not built in."""
    found = _validate_core_json(json.dumps(obj, sort_keys=True))
    return None if found is None else [Finding(ref(obj), message) for message in found]


@lru_cache(maxsize=4096)
def _validate_core_json(text: str) -> tuple[str, ...] | None:
    """kubernetes-validate on one object (as JSON): cached, since a build's objects repeat across checks."""
    import kubernetes_validate as kv

    obj, out = json.loads(text), []
    for version in K8S_VERSIONS:
        try:
            kv.validate(obj, version, strict=True)
        except kv.SchemaNotFoundError:
            return None
        except kv.ValidationError as exc:
            out.append(f"Kubernetes {exc.version} schema (strict): {_where(exc)}: {exc.message}")
    return tuple(out)


def validate_all(objs: list[Obj]) -> list[Finding]:
    """Schema findings of a whole build (empty = every object valid)."""
    out: list[Finding] = []
    for obj in objs:
        found = validate_core(obj)
        if found is None:
            found = validate_crd(obj)
        if found is None:
            found = [Finding(ref(obj), f"no schema for {obj.get('apiVersion')} {obj.get('kind')}: "
                                       "add one to k8s/schemas/ (see its README)")]
        out += found
    return out
