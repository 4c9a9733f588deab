"""streamgrpo's policy checks on a built set of Kubernetes objects (the output of ``kubectl kustomize``).

Schemas (field names, types, required fields) are checked by ``kschemas.py``; what stays here is
what no schema says. Every check returns a list of :class:`Finding` (empty = passed):

- namespaced objects live in a Namespace that is part of the build;
- workloads (Deployment, StatefulSet, DaemonSet, Job, CronJob): selector matches the pod template
  labels; every container has a pinned image (a tag other than ``latest``, or a digest), cpu and
  memory requests, a memory limit, requests <= limits, equal requests/limits for ``nvidia.com/gpu``;
  long-running workloads have liveness and readiness probes whose named ports exist; security
  context: non-root, no privilege escalation, capabilities drop ALL, not privileged, read-only
  root filesystem unless the workload carries a ``streamgrpo.io/writable-root-reason``; a workload that carries a
  ``streamgrpo.io/privileged-reason`` (the node installer of the sandbox profiles, k8s/node) may run privileged as
  root, and only in a Namespace of the build whose Pod Security level is ``privileged``;
- references: every ConfigMap (and key), Secret, PersistentVolumeClaim and volume mount a pod
  uses exists in the build (a Secret named like a KafkaUser of the build, key ``password``, is
  created by the Strimzi User Operator); Secrets outside the build must be declared in the workload's
  ``streamgrpo.io/external-secrets`` annotation and referenced with ``optional: true``;
- Services select at least one pod template and their named target ports exist;
- autoscaling: HPAs and KEDA ScaledObjects point at an existing workload (a CPU HPA at one whose
  containers request CPU), min <= max, never two autoscalers on one workload; workloads annotated
  ``streamgrpo.io/scaled-by-topics`` never scale past the partition count of those topics;
- every Deployment has a PodDisruptionBudget selecting its pods; the trainer runs one replica
  with strategy Recreate;
- Kafka (Strimzi): KafkaTopic/KafkaNodePool belong to a Kafka of the build, KRaft + node-pool
  annotations set, replication factors (topics, internal topics, min.insync.replicas) fit the
  broker count.

What is not covered: anything a cluster decides (admission, scheduling, RBAC). The settings and
wiring checks (the real settings loader, bootstrap, vLLM, metrics ports, KEDA groups) live in
``ksettings.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}
BATCH = {"Job", "CronJob"}
EXTERNAL_SECRETS = "streamgrpo.io/external-secrets"
WRITABLE_ROOT = "streamgrpo.io/writable-root-reason"
PRIVILEGED = "streamgrpo.io/privileged-reason"
PSS_ENFORCE = "pod-security.kubernetes.io/enforce"
SCALED_BY = "streamgrpo.io/scaled-by-topics"
_SUFFIX = {"m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


@dataclass(frozen=True)
class Finding:
    """One problem: which object, and what is wrong."""

    obj: str
    message: str

    def __str__(self) -> str:
        return f"{self.obj}: {self.message}"


def ref(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind', '?')}/{ns}{meta.get('name', '?')}"


def quantity(value: Any) -> float:
    """Parse a Kubernetes quantity ("250m", "4Gi", 2) into a float."""
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value))
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def index(objs: Iterable[Obj]) -> dict[tuple[str, str | None, str], Obj]:
    return {(o.get("kind", ""), (o.get("metadata") or {}).get("namespace"), (o.get("metadata") or {}).get("name", "")): o
            for o in objs}


def pod_template(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return spec.get("template") or {}


def containers(pod: Obj) -> list[Obj]:
    return list(pod.get("containers") or []) + list(pod.get("initContainers") or [])


def check_namespaces(objs: list[Obj]) -> list[Finding]:
    namespaces = {o["metadata"]["name"] for o in objs if o.get("kind") == "Namespace" and o.get("metadata")}
    out: list[Finding] = []
    for o in objs:
        ns = (o.get("metadata") or {}).get("namespace")
        if o.get("kind") != "Namespace" and ns is not None and ns not in namespaces:
            out.append(Finding(ref(o), f"namespace {ns!r} is not created by this build"))
    return out


def _image_problem(image: str) -> str | None:
    if not image:
        return "no image"
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {image!r} has no tag (pin a version)"
    if last.rsplit(":", 1)[1] == "latest":
        return f"image {image!r} uses the floating tag 'latest' (pin a version)"
    return None


def _resource_problems(c: Obj) -> list[str]:
    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    out = [f"no resources.requests.{r}" for r in ("cpu", "memory") if r not in req]
    if "memory" not in lim:
        out.append("no resources.limits.memory")
    for r in set(req) & set(lim):
        try:
            if quantity(req[r]) > quantity(lim[r]):
                out.append(f"requests.{r} {req[r]} exceeds limits.{r} {lim[r]}")
        except ValueError as exc:
            out.append(str(exc))
    gpu = "nvidia.com/gpu"
    if gpu in req and gpu in lim and str(req[gpu]) != str(lim[gpu]):
        out.append(f"{gpu} request and limit must be equal")
    if gpu in req and gpu not in lim:
        out.append(f"{gpu} needs a limit")
    return out


def _security_problems(pod: Obj, c: Obj, writable_ok: bool, privileged_ok: bool = False) -> list[str]:
    psc, sc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    out = []
    if privileged_ok:  # root and privileged by design (its reason is in the annotation); the root fs stays read-only
        return [] if sc.get("readOnlyRootFilesystem") is True or writable_ok else [
            f"readOnlyRootFilesystem is not true (set it, or give the reason in {WRITABLE_ROOT})"]
    if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
        out.append("runAsNonRoot is not true")
    if sc.get("runAsUser", psc.get("runAsUser")) == 0:
        out.append("runs as uid 0")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append("allowPrivilegeEscalation is not false")
    if sc.get("privileged") is True:
        out.append("privileged")
    if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
        out.append("capabilities.drop does not include ALL")
    if sc.get("readOnlyRootFilesystem") is not True and not writable_ok:
        out.append(f"readOnlyRootFilesystem is not true (set it, or give the reason in {WRITABLE_ROOT})")
    return out


def _probe_problems(c: Obj) -> list[str]:
    out = [f"no {p}" for p in ("livenessProbe", "readinessProbe") if not c.get(p)]
    ports = {p.get("name") for p in c.get("ports") or []}
    for p in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = c.get(p) or {}
        for handler in ("httpGet", "tcpSocket", "grpc"):
            port = (probe.get(handler) or {}).get("port")
            if isinstance(port, str) and port not in ports:
                out.append(f"{p} uses port {port!r}, which the container does not declare")
    return out


def check_workloads(objs: list[Obj]) -> list[Finding]:
    out: list[Finding] = []
    for o in objs:
        if o.get("kind") not in WORKLOADS:
            continue
        annotations = (o.get("metadata") or {}).get("annotations") or {}
        tmpl = pod_template(o)
        pod, labels = tmpl.get("spec") or {}, (tmpl.get("metadata") or {}).get("labels") or {}
        if o["kind"] not in BATCH:
            sel = ((o.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            if not sel:
                out.append(Finding(ref(o), "no spec.selector.matchLabels"))
            elif any(labels.get(k) != v for k, v in sel.items()):
                out.append(Finding(ref(o), f"selector {sel} does not match template labels {labels}"))
        if not pod.get("containers"):
            out.append(Finding(ref(o), "pod template has no containers"))
        mounts_ok = {v.get("name") for v in pod.get("volumes") or []}
        privileged_ok = bool(annotations.get(PRIVILEGED))
        if privileged_ok:
            ns = next((n for n in objs if n.get("kind") == "Namespace"
                       and n["metadata"].get("name") == o["metadata"].get("namespace")), None)
            level = ((ns or {}).get("metadata", {}).get("labels") or {}).get(PSS_ENFORCE)
            if level != "privileged":
                out.append(Finding(ref(o), f"{PRIVILEGED} needs a Namespace of the build with {PSS_ENFORCE}: privileged "
                                           f"(its namespace enforces {level!r}); keep privileged pods out of streamgrpo's"))
        for c in containers(pod):
            where = f"container {c.get('name')!r}: "
            problems = [p for p in [_image_problem(str(c.get("image", "")))] if p]
            problems += _resource_problems(c)
            problems += _security_problems(pod, c, bool(annotations.get(WRITABLE_ROOT)), privileged_ok)
            if o["kind"] not in BATCH and c in (pod.get("containers") or []):
                problems += _probe_problems(c)
            problems += [f"volumeMount {m.get('name')!r} has no volume" for m in c.get("volumeMounts") or []
                         if m.get("name") not in mounts_ok]
            out += [Finding(ref(o), where + p) for p in problems]
    return out


def _pod_references(pod: Obj) -> Iterable[tuple[str, str, str | None, bool]]:
    """(kind, name, key or None, optional) for every ConfigMap/Secret/PVC a pod spec uses."""
    for v in pod.get("volumes") or []:
        if "configMap" in v:
            cm = v["configMap"]
            yield "ConfigMap", cm.get("name", ""), None, bool(cm.get("optional"))
            for item in cm.get("items") or []:
                yield "ConfigMap", cm.get("name", ""), item.get("key"), bool(cm.get("optional"))
        if "secret" in v:
            yield "Secret", v["secret"].get("secretName", ""), None, bool(v["secret"].get("optional"))
        if "persistentVolumeClaim" in v:
            yield "PersistentVolumeClaim", v["persistentVolumeClaim"].get("claimName", ""), None, False
    for c in containers(pod):
        for e in c.get("env") or []:
            src = e.get("valueFrom") or {}
            for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                if field in src:
                    r = src[field]
                    yield kind, r.get("name", ""), r.get("key"), bool(r.get("optional"))
        for e in c.get("envFrom") or []:
            for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                if field in e:
                    yield kind, e[field].get("name", ""), None, bool(e[field].get("optional"))


def check_references(objs: list[Obj]) -> list[Finding]:
    out: list[Finding] = []
    idx = index(objs)
    for o in objs:
        if o.get("kind") not in WORKLOADS:
            continue
        ns = (o.get("metadata") or {}).get("namespace")
        external = {s.strip() for s in ((o["metadata"].get("annotations") or {}).get(EXTERNAL_SECRETS, "")).split(",")
                    if s.strip()}
        for kind, name, key, optional in _pod_references(pod_template(o).get("spec") or {}):
            target = idx.get((kind, ns, name))
            if target is None and kind == "Secret" and (key or "password") == "password" and (
                    ("KafkaUser", ns, name) in idx):
                continue  # the Strimzi User Operator creates it (key `password`) for the KafkaUser of that name
            if target is None:
                if kind == "Secret" and name in external:
                    if not optional:
                        out.append(Finding(ref(o), f"external Secret {name!r} must be referenced with optional: true"))
                    continue
                out.append(Finding(ref(o), f"{kind} {name!r} is referenced but not part of the build"))
            elif key is not None:
                data = {**(target.get("data") or {}), **(target.get("stringData") or {}),
                        **(target.get("binaryData") or {})}
                if key not in data:
                    out.append(Finding(ref(o), f"{kind} {name!r} has no key {key!r}"))
    return out


def _templates(objs: list[Obj], ns: str | None) -> list[tuple[Obj, Obj]]:
    return [(o, pod_template(o)) for o in objs if o.get("kind") in WORKLOADS and o["metadata"].get("namespace") == ns]


def check_services(objs: list[Obj]) -> list[Finding]:
    out: list[Finding] = []
    for s in objs:
        if s.get("kind") != "Service":
            continue
        sel = (s.get("spec") or {}).get("selector") or {}
        if not sel:
            continue  # selector-less Services (external endpoints) are allowed
        hits = [(w, t) for w, t in _templates(objs, s["metadata"].get("namespace"))
                if all(((t.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in sel.items())]
        if not hits:
            out.append(Finding(ref(s), f"selector {sel} matches no pod template in the build"))
            continue
        names = {p.get("name") for _, t in hits for c in (t.get("spec") or {}).get("containers") or []
                 for p in c.get("ports") or []}
        for p in (s.get("spec") or {}).get("ports") or []:
            tp = p.get("targetPort")
            if isinstance(tp, str) and tp not in names:
                out.append(Finding(ref(s), f"targetPort {tp!r} is not a named port of the selected pods"))
    return out


AUTOSCALERS = {"HorizontalPodAutoscaler": ("minReplicas", "maxReplicas"),
               "ScaledObject": ("minReplicaCount", "maxReplicaCount")}


def _scales(objs: list[Obj], w: Obj) -> list[Obj]:
    """The HPAs and ScaledObjects whose scaleTargetRef is workload ``w``."""
    return [h for h in objs if h.get("kind") in AUTOSCALERS
            and h["metadata"].get("namespace") == w["metadata"].get("namespace")
            and ((h.get("spec") or {}).get("scaleTargetRef") or {}).get("kind", "Deployment") == w["kind"]
            and ((h.get("spec") or {}).get("scaleTargetRef") or {}).get("name") == w["metadata"]["name"]]


def _max_scale(objs: list[Obj], w: Obj) -> int:
    scale = int((w.get("spec") or {}).get("replicas", 1))
    for h in _scales(objs, w):
        scale = max(scale, int(h["spec"].get(AUTOSCALERS[h["kind"]][1], 100)))
    return scale


def _check_autoscaler(objs: list[Obj], h: Obj) -> list[Finding]:
    spec = h.get("spec") or {}
    tgt = spec.get("scaleTargetRef") or {}
    w = index(objs).get((tgt.get("kind", "Deployment"), h["metadata"].get("namespace"), tgt.get("name", "")))
    if w is None:
        return [Finding(ref(h), f"scaleTargetRef {tgt.get('kind', 'Deployment')}/{tgt.get('name')} is not in the build")]
    lo, hi = AUTOSCALERS[h["kind"]]
    out = []
    if int(spec.get(lo, 1)) > int(spec.get(hi, 100)):
        out.append(Finding(ref(h), f"{lo} > {hi}"))
    if len(_scales(objs, w)) > 1:
        out.append(Finding(ref(h), f"{ref(w)} has more than one autoscaler (they would fight over replicas)"))
    if "replicas" in (w.get("spec") or {}):
        out.append(Finding(ref(w), f"sets spec.replicas but {ref(h)} owns the count (apply would reset it)"))
    for m in spec.get("metrics") or []:
        res = (m.get("resource") or {}).get("name")
        for c in (pod_template(w).get("spec") or {}).get("containers") or []:
            if res and res not in ((c.get("resources") or {}).get("requests") or {}):
                out.append(Finding(ref(h), f"scales on {res} but container {c.get('name')!r} requests no {res}"))
    return out


def check_autoscaling(objs: list[Obj]) -> list[Finding]:
    out: list[Finding] = [f for h in objs if h.get("kind") in AUTOSCALERS for f in _check_autoscaler(objs, h)]
    partitions = {(t.get("spec") or {}).get("topicName") or t["metadata"]["name"]: int(t["spec"].get("partitions", 1))
                  for t in objs if t.get("kind") == "KafkaTopic"}
    for w in objs:
        topics = ((w.get("metadata") or {}).get("annotations") or {}).get(SCALED_BY)
        if w.get("kind") not in WORKLOADS or not topics:
            continue
        names = [t.strip() for t in topics.split(",") if t.strip()]
        missing = [t for t in names if t not in partitions]
        if missing:
            out.append(Finding(ref(w), f"{SCALED_BY} names topics not in the build: {missing}"))
            continue
        bound, scale = min(partitions[t] for t in names), _max_scale(objs, w)
        if scale > bound:
            out.append(Finding(ref(w), f"can scale to {scale} replicas but {names} have only {bound} partitions"))
    return out


def check_disruption(objs: list[Obj]) -> list[Finding]:
    """Every Deployment has a PodDisruptionBudget; the trainer is one replica with strategy Recreate."""
    out: list[Finding] = []
    pdbs = [p for p in objs if p.get("kind") == "PodDisruptionBudget"]
    for w in objs:
        if w.get("kind") != "Deployment":
            continue
        labels = (pod_template(w).get("metadata") or {}).get("labels") or {}
        covering = [p for p in pdbs if p["metadata"].get("namespace") == w["metadata"].get("namespace")
                    and all(labels.get(k) == v for k, v in
                            (((p.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}).items())]
        if not covering:
            out.append(Finding(ref(w), "no PodDisruptionBudget selects its pods"))
        if w["metadata"]["name"] == "trainer":
            spec = w.get("spec") or {}
            if spec.get("replicas") != 1 or (spec.get("strategy") or {}).get("type") != "Recreate" or _scales(objs, w):
                out.append(Finding(ref(w), "the trainer must run exactly one replica with strategy Recreate "
                                           "and no autoscaler (two trainers would publish from the same offsets)"))
    return out


def _brokers(objs: list[Obj], cluster: str) -> int:
    return sum(int(p["spec"].get("replicas", 0)) for p in objs if p.get("kind") == "KafkaNodePool"
               and (p["metadata"].get("labels") or {}).get("strimzi.io/cluster") == cluster
               and "broker" in (p["spec"].get("roles") or []))


def check_kafka(objs: list[Obj]) -> list[Finding]:
    out: list[Finding] = []
    clusters = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "Kafka"}
    for name, k in clusters.items():
        ann = k["metadata"].get("annotations") or {}
        for a in ("strimzi.io/node-pools", "strimzi.io/kraft"):
            if ann.get(a) != "enabled":
                out.append(Finding(ref(k), f"annotation {a}: enabled is required for KRaft with node pools"))
        brokers = _brokers(objs, name)
        if brokers < 1:
            out.append(Finding(ref(k), "no KafkaNodePool with the broker role"))
        cfg = ((k.get("spec") or {}).get("kafka") or {}).get("config") or {}
        for key in ("default.replication.factor", "offsets.topic.replication.factor",
                    "transaction.state.log.replication.factor"):
            if key in cfg and int(cfg[key]) > brokers:
                out.append(Finding(ref(k), f"{key}={cfg[key]} exceeds the {brokers} broker(s)"))
        rf = int(cfg.get("default.replication.factor", 1))
        if "min.insync.replicas" in cfg and int(cfg["min.insync.replicas"]) > rf:
            out.append(Finding(ref(k), "min.insync.replicas exceeds default.replication.factor"))
    for o in objs:
        if o.get("kind") not in {"KafkaTopic", "KafkaNodePool", "KafkaUser"}:
            continue
        cluster = (o["metadata"].get("labels") or {}).get("strimzi.io/cluster")
        if cluster not in clusters:
            out.append(Finding(ref(o), f"label strimzi.io/cluster={cluster!r} names no Kafka in the build"))
        elif o["kind"] == "KafkaTopic":
            spec, brokers = o.get("spec") or {}, _brokers(objs, str(cluster))
            if int(spec.get("replicas", 1)) > brokers:
                out.append(Finding(ref(o), f"replicas {spec.get('replicas')} exceed the {brokers} broker(s)"))
            if int(spec.get("partitions", 0)) < 1:
                out.append(Finding(ref(o), "partitions must be >= 1"))
    return out


ALL_CHECKS = (check_namespaces, check_workloads, check_references, check_services, check_autoscaling,
              check_disruption, check_kafka)


def run_all(objs: list[Obj]) -> list[Finding]:
    """Every generic check of this module on one build."""
    return [f for check in ALL_CHECKS for f in check(objs)]
