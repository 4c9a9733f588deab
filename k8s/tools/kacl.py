"""Kafka authentication and ACL checks on a built set of objects (``k8s/components/kafka-acl``).

- ``adapter-events``: no KafkaUser other than the trainer's, streams', the evaluator's and the
  operator's has Write (or All) on it, literal, prefix or ``*`` (an AdapterPublished forged by a
  rollout worker, the judge or the MCP server would stall the loop);
- a build with KafkaUsers (simple authorization) has a Kafka that authorizes (``authorization:
  simple``), runs the User Operator and authenticates a listener with SCRAM-SHA-512;
- once a Kafka authenticates a listener, every container with a Kafka bootstrap (``[kafka] bootstrap``
  of the ConfigMap ``streamgrpo-config`` or ``STREAMGRPO_KAFKA__BOOTSTRAP``) has SASL settings whose
  user is a KafkaUser of the build, with the password from that user's Secret (key ``password``);
- KEDA's Kafka triggers then use ``sasl: scram_sha512`` and a TriggerAuthentication of the build
  with a user name and the password of a KafkaUser.

What is not covered: whether each principal's ACLs suffice for what its service does (the catalog
test ``tests/unit/topics/test_catalog_writers.py`` and a cluster do), TLS, deny rules.
"""

from __future__ import annotations

from typing import Any

import tomllib
from kchecks import WORKLOADS, Finding, Obj, index, pod_template, ref

ADAPTER_EVENTS = "adapter-events"
#: The KafkaUsers (k8s/kafka_acl.py user_name) that may write adapter-events.
ADAPTER_WRITERS = frozenset({"kafka-trainer", "kafka-streams", "kafka-evaluator", "kafka-operator"})
SCRAM = "scram-sha-512"
CONFIG_MAP, CONFIG_KEY = "streamgrpo-config", "streamgrpo.toml"


def _matches(resource: dict[str, Any], topic: str) -> bool:
    name = str(resource.get("name", ""))
    if resource.get("type") != "topic":
        return False
    if resource.get("patternType") == "prefix":
        return topic.startswith(name)
    return name in (topic, "*")


def _users(objs: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objs if o.get("kind") == "KafkaUser"}


def check_adapter_writers(objs: list[Obj]) -> list[Finding]:
    out = []
    for name, u in _users(objs).items():
        for acl in ((u.get("spec") or {}).get("authorization") or {}).get("acls") or []:
            ops = set(acl.get("operations") or []) | ({acl["operation"]} if "operation" in acl else set())
            if (acl.get("type", "allow") == "allow" and ops & {"Write", "All"}
                    and _matches(acl.get("resource") or {}, ADAPTER_EVENTS) and name not in ADAPTER_WRITERS):
                out.append(Finding(ref(u), f"may write {ADAPTER_EVENTS} (only {sorted(ADAPTER_WRITERS)} may: "
                                           "a forged AdapterPublished stalls the loop)"))
    return out


def _secured(k: Obj) -> bool:
    return any(((li.get("authentication") or {}).get("type")) == SCRAM
               for li in ((k.get("spec") or {}).get("kafka") or {}).get("listeners") or [])


def check_cluster(objs: list[Obj]) -> list[Finding]:
    out = []
    users = _users(objs)
    for k in (o for o in objs if o.get("kind") == "Kafka"):
        spec = k.get("spec") or {}
        authz = (spec.get("kafka") or {}).get("authorization") or {}
        mine = [u for u in users.values() if (u["metadata"].get("labels") or {}).get("strimzi.io/cluster")
                == k["metadata"]["name"]]
        if not mine:
            continue
        if authz.get("type") != "simple":
            out.append(Finding(ref(k), "KafkaUsers carry ACLs but spec.kafka.authorization is not simple: "
                                       "every client may write every topic"))
        if "userOperator" not in (spec.get("entityOperator") or {}):
            out.append(Finding(ref(k), "KafkaUsers but no entityOperator.userOperator: no user or Secret is created"))
        if not _secured(k):
            out.append(Finding(ref(k), f"KafkaUsers but no listener authenticates with {SCRAM}"))
    return out


def _toml(objs: list[Obj]) -> dict[str, Any]:
    cm = next((o for o in objs if o.get("kind") == "ConfigMap" and o["metadata"].get("name") == CONFIG_MAP), {})
    try:
        return tomllib.loads(str((cm.get("data") or {}).get(CONFIG_KEY, "")))
    except tomllib.TOMLDecodeError:
        return {}  # ksettings reports it


def _client_problems(c: Obj, users: dict[str, Obj]) -> list[str]:
    env = {e["name"]: e for e in c.get("env") or []}
    val = {n: str(e.get("value", "")) for n, e in env.items()}
    out = []
    if not val.get("STREAMGRPO_KAFKA__SECURITY_PROTOCOL", "").startswith("SASL"):
        out.append("STREAMGRPO_KAFKA__SECURITY_PROTOCOL is not SASL_*")
    if val.get("STREAMGRPO_KAFKA__SASL_MECHANISM") != "SCRAM-SHA-512":
        out.append("STREAMGRPO_KAFKA__SASL_MECHANISM is not SCRAM-SHA-512")
    user = val.get("STREAMGRPO_KAFKA__SASL_USERNAME", "")
    if ((users.get(user) or {}).get("spec") or {}).get("authentication", {}).get("type") != SCRAM:
        out.append(f"STREAMGRPO_KAFKA__SASL_USERNAME {user!r} is not a {SCRAM} KafkaUser of the build")
    secret = ((env.get("STREAMGRPO_KAFKA__SASL_PASSWORD") or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
    if user and (secret.get("name"), secret.get("key")) != (user, "password"):
        out.append(f"STREAMGRPO_KAFKA__SASL_PASSWORD must come from secretKeyRef {{name: {user}, key: password}}")
    return out


def check_clients(objs: list[Obj]) -> list[Finding]:
    if not any(_secured(k) for k in objs if k.get("kind") == "Kafka"):
        return []
    users, toml_bootstrap = _users(objs), bool((_toml(objs).get("kafka") or {}).get("bootstrap"))
    out = []
    for w in (o for o in objs if o.get("kind") in WORKLOADS):
        for c in (pod_template(w).get("spec") or {}).get("containers") or []:
            names = {e.get("name") for e in c.get("env") or []}
            if "STREAMGRPO_KAFKA__BOOTSTRAP" in names or ("STREAMGRPO_CONFIG" in names and toml_bootstrap):
                out += [Finding(ref(w), f"container {c.get('name')!r}: {p} (the broker requires SCRAM)")
                        for p in _client_problems(c, users)]
    return out


def check_keda(objs: list[Obj]) -> list[Finding]:
    if not any(_secured(k) for k in objs if k.get("kind") == "Kafka"):
        return []
    idx, users, out = index(objs), _users(objs), []
    for so in (o for o in objs if o.get("kind") == "ScaledObject"):
        for trig in (so.get("spec") or {}).get("triggers") or []:
            if trig.get("type") != "kafka":
                continue
            if (trig.get("metadata") or {}).get("sasl") != "scram_sha512":
                out.append(Finding(ref(so), "kafka trigger without sasl: scram_sha512 (the broker requires SCRAM)"))
            name = (trig.get("authenticationRef") or {}).get("name")
            ta = idx.get(("TriggerAuthentication", so["metadata"].get("namespace"), str(name)))
            if ta is None:
                out.append(Finding(ref(so), f"kafka trigger: TriggerAuthentication {name!r} is not in the build"))
                continue
            spec = ta.get("spec") or {}
            params = {p.get("parameter") for src in spec.values() for p in src}
            passwords = [p for p in spec.get("secretTargetRef") or [] if p.get("parameter") == "password"]
            if not {"username", "password"} <= params or not all(p.get("name") in users for p in passwords):
                out.append(Finding(ref(ta), "needs parameters username and password, the password from a KafkaUser's "
                                            "Secret"))
    return out


def check_all(objs: list[Obj]) -> list[Finding]:
    """Every check of this module on one build."""
    return check_adapter_writers(objs) + check_cluster(objs) + check_clients(objs) + check_keda(objs)
