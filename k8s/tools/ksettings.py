"""streamgrpo's settings and wiring checks on a build: the real settings loader and what must agree.

- the ``streamgrpo.toml`` of the ConfigMap ``streamgrpo-config`` parses; every section and every
  ``STREAMGRPO_*`` environment variable of every streamgrpo container is accepted by the real
  settings loader (``streamgrpo.config.load`` with that container's environment: the process
  would start);
- the Kafka bootstrap and the vLLM URL name Services of the build (or the Strimzi bootstrap
  Service of a Kafka of the build) on a port they expose;
- rollout workers that use vLLM find a vLLM Deployment with replicas, serving their model, mounting
  their adapter store, whose ``--max-lora-rank`` admits the trainer's ``lora_rank``; the trainer,
  the workers and vLLM share one adapter-store PVC;
- one base model: every workload that loads (or asks vLLM for) a model -- rollout, evaluator and ``serve`` ([rollout]
  model, or vllm_model when their policy is vllm; ``serve --model``), the trainer ([trainer] base_model) and vLLM
  (``--served-model-name`` / ``--model``, with Kubernetes' ``$(VAR)`` expansion) -- loads the value of the ConfigMap
  ``streamgrpo-model`` (key ``base_model``), or, in a build without it, the trainer's; a vLLM with replicas does not
  serve the bundled CPU alias, which only streamgrpo resolves;
- the python tool's jail (``ksandbox.py``): every container that builds it carries the sandbox's seccomp and
  AppArmor profiles;
- metrics: each service container declares a port named ``metrics`` equal to its section's
  ``metrics_port``, and its pod's ``prometheus.io/port`` annotation (when present) says the same;
- KEDA: a ScaledObject's Kafka trigger watches the consumer group the target's settings use
  (``[rollout] consumer_group`` / ``[judge] consumer_group``) and a bootstrap Service of the build;
- pacing: the streams and trainer containers load the same ``[loop] samples_per_step`` and ``max_staleness``
  (admission paces groups by the trainer's step), and every worker a ScaledObject on ``rollout-requests`` may
  start has a full batch (``lagThreshold``) to run: admission lets ``(1 + max_staleness) * samples_per_step``
  samples wait for the trainer or run, up to one step of them wait, so the workers hold at most
  ``max_staleness * samples_per_step`` requests at once, and ``maxReplicaCount * lagThreshold`` must fit in it.
  Workers beyond it are started by KEDA for nothing or never started (the scaling that "added nothing" in
  issue 21; ``bench/bench_scaling.py`` measures the throughput at both sides of the rule). Likewise admission
  starts at most ``[streams] max_groups_in_flight`` groups at once: it must cover ``maxReplicaCount`` workers of
  ``[rollout] concurrency`` groups each.

What is not covered: whether images exist in their registries, whether the model names exist on
the hub, anything that needs a running cluster.
"""

from __future__ import annotations

import copy
import importlib
import re
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import ksandbox
import tomllib
from kchecks import SCALED_BY, WORKLOADS, Finding, Obj, index, pod_template, ref

CONFIG_MAP, CONFIG_KEY = "streamgrpo-config", "streamgrpo.toml"
IMAGE = "ghcr.io/streamgrpo/streamgrpo"
#: TOML section -> "module:Model" of its settings.
SECTION_MODELS = {
    "kafka": "streamgrpo.config:KafkaSettings",
    "broker": "streamgrpo.config:BrokerSettings",
    "loop": "streamgrpo.config:LoopSettings",
    "rollout": "streamgrpo.rollout.config:RolloutConfig",
    "judge": "streamgrpo.judge.config:JudgeSettings",
    "streams": "streamgrpo.streams.config:StreamsSettings",
    "trainer": "streamgrpo.trainer.config:TrainerConfig",
    "evaluator": "streamgrpo.evaluation.service:EvaluatorSettings",
}
#: first CLI argument of a streamgrpo container -> the settings section it runs with.
COMMAND_SECTION = {"rollout": "rollout", "judge": "judge", "streams": "streams", "trainer": "trainer",
                   "evaluator": "evaluator"}
def _env(c: Obj) -> dict[str, str]:
    """A container's plain environment; values from Secrets/ConfigMaps become placeholders."""
    env = {}
    for e in c.get("env") or []:
        env[e["name"]] = str(e["value"]) if "value" in e else f"<from {next(iter(e.get('valueFrom') or {'?': 0}))}>"
    return env


def _streamgrpo_containers(objs: list[Obj]) -> list[tuple[Obj, Obj]]:
    return [(w, c) for w in objs if w.get("kind") in WORKLOADS
            for c in (pod_template(w).get("spec") or {}).get("containers") or []
            if str(c.get("image", "")).startswith(IMAGE)]


def effective(toml: dict[str, Any], section: str, env: dict[str, str]) -> dict[str, Any]:
    """TOML section overlaid with the container's flat STREAMGRPO_<SECTION>__<FIELD> variables."""
    out = dict(toml.get(section) or {})
    prefix = f"STREAMGRPO_{section.upper()}__"
    out.update({k[len(prefix):].lower(): v for k, v in env.items() if k.startswith(prefix)})
    return out


Loaded = dict[tuple[int, str], Any]


def _load_models(toml_text: str, pairs: list[tuple[Obj, Obj]]) -> tuple[list[Finding], list[str], Loaded]:
    """Run the real settings loader for every section with every container's environment.

    Returns (findings, notes, {(id(container), section): the loaded settings object}).
    """
    loaded: Loaded = {}
    try:
        config = importlib.import_module("streamgrpo.config")
    except ModuleNotFoundError:
        return [], ["streamgrpo not importable: settings-model validation skipped"], loaded
    out: list[Finding] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / CONFIG_KEY
        path.write_text(toml_text)
        for section, target in SECTION_MODELS.items():
            module, attr = target.split(":")
            try:
                model = getattr(importlib.import_module(module), attr)
            except (ModuleNotFoundError, AttributeError) as exc:
                notes.append(f"[{section}] not validated: {target} not importable ({exc})")
                continue
            for w, c in pairs:
                try:
                    loaded[(id(c), section)] = config.load(model, section, path=path, environ=_env(c))
                except config.ConfigError as exc:
                    out.append(Finding(ref(w), f"container {c['name']!r}: {exc}"))
    return out, notes, loaded


def _service_port(objs: list[Obj], ns: str | None, host: str, port: int) -> str | None:
    """None if host:port is a Service (or Strimzi bootstrap Service) of the build, else the problem."""
    labels = host.split(".")
    in_cluster = len(labels) <= 2 or ".svc" in host  # name, name.namespace, name.namespace.svc[...]
    if not in_cluster:
        return None  # an external host name: not ours to check
    name = labels[0]
    if len(labels) > 1 and labels[1] != ns:
        return f"{host}: namespace {labels[1]!r} is not the workload's namespace {ns!r}"
    for k in objs:
        if k.get("kind") == "Kafka" and name == f"{k['metadata']['name']}-kafka-bootstrap":
            ports = {int(li.get("port", 0)) for li in k["spec"]["kafka"].get("listeners") or []}
            return None if port in ports else f"{host}:{port}: Kafka {k['metadata']['name']} has no listener on {port}"
    svc = index(objs).get(("Service", ns, name))
    if svc is None:
        return f"{host}: no Service {name!r} (nor a Strimzi bootstrap Service) in the build"
    if port not in {int(p.get("port", 0)) for p in svc["spec"].get("ports") or []}:
        return f"{host}:{port}: Service {name!r} does not expose port {port}"
    return None


def _mount_claim(w: Obj, c: Obj, path: str) -> str | None:
    """The PVC mounted at ``path`` in container ``c`` of workload ``w`` (None if none)."""
    vols = {v["name"]: v for v in (pod_template(w).get("spec") or {}).get("volumes") or []}
    for m in c.get("volumeMounts") or []:
        if m.get("mountPath") == path and "persistentVolumeClaim" in vols.get(m.get("name"), {}):
            return str(vols[m["name"]]["persistentVolumeClaim"].get("claimName"))
    return None


def _arg(args: list[str], flag: str) -> str | None:
    """Value of ``--flag=v`` or ``--flag v`` in a command line (None if absent)."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of ``$(VAR)`` in a container's command and args (``$$`` escapes; unknown stays)."""
    return _VAR_REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def _vllm_args(w: Obj) -> list[str] | None:
    for c in (pod_template(w).get("spec") or {}).get("containers") or []:
        env = _env(c)
        args = [expand(str(a), env) for a in (c.get("command") or []) + (c.get("args") or [])]
        if "--enable-lora" in args:
            return args
    return None


def _vllm_model(w: Obj) -> str | None:
    args = _vllm_args(w)
    return None if args is None else (_arg(args, "--served-model-name") or _arg(args, "--model"))


def _check_wiring(objs: list[Obj], toml: dict[str, Any], pairs: list[tuple[Obj, Obj]], loaded: Loaded) -> list[Finding]:
    out: list[Finding] = []
    by_section = {COMMAND_SECTION[str((c.get("args") or [""])[0])]: (w, c) for w, c in pairs
                  if str((c.get("args") or [""])[0]) in COMMAND_SECTION}
    for w, c in pairs:
        ns = w["metadata"].get("namespace")
        for hostport in str(effective(toml, "kafka", _env(c)).get("bootstrap") or "").split(","):
            host, _, port = hostport.strip().rpartition(":")
            problem = _service_port(objs, ns, host, int(port or 0)) if host else "[kafka] bootstrap is not set"
            if problem:
                out.append(Finding(ref(w), f"kafka bootstrap {problem}"))
    rollout, trainer = by_section.get("rollout"), by_section.get("trainer")
    if rollout:
        w, c = rollout
        r = {**effective(toml, "rollout", _env(c)), "adapter_store": effective(toml, "loop", _env(c)).get("adapter_store")}
        if r.get("policy") == "vllm":
            t_cfg = loaded.get((id(trainer[1]), "trainer")) if trainer else None
            out += _check_vllm(objs, w, c, r, getattr(t_cfg, "lora_rank", None))
        if trainer:
            t = effective(toml, "trainer", _env(trainer[1]))
            t_store = effective(toml, "loop", _env(trainer[1])).get("adapter_store")
            if r.get("model") != t.get("base_model"):
                out.append(Finding(ref(w), f"rollout model {r.get('model')!r} != trainer base_model {t.get('base_model')!r}"))
            if r.get("adapter_store") != t_store:  # one [loop] setting, unless a container's env overrides it
                out.append(Finding(ref(w), f"rollout [loop] adapter_store {r.get('adapter_store')!r} != the trainer's "
                                           f"{t_store!r}"))
            claims = {_mount_claim(w, c, str(r.get("adapter_store"))), _mount_claim(*trainer, str(t_store))}
            if None in claims or len(claims) != 1:
                out.append(Finding(ref(w), f"rollout and trainer do not mount one adapter-store PVC at the store path: {claims}"))
    streams = by_section.get("streams")
    s_cfg = loaded.get((id(streams[1]), "streams")) if streams else None
    if streams and trainer and getattr(s_cfg, "adapter_check", True):
        s_store = str(effective(toml, "loop", _env(streams[1])).get("adapter_store"))
        t_claim = _mount_claim(*trainer, str(effective(toml, "loop", _env(trainer[1])).get("adapter_store")))
        s_claim = _mount_claim(*streams, s_store)
        if s_claim is None or s_claim != t_claim:
            out.append(Finding(ref(streams[0]), f"streams checks adapter files ([streams] adapter_check) but mounts "
                               f"{s_claim!r} at {s_store}, not the trainer's adapter-store PVC {t_claim!r}: mount it "
                               "(read-only) or set adapter_check = false"))
    return out


def _check_vllm(objs: list[Obj], w: Obj, c: Obj, r: dict[str, Any], lora_rank: int | None) -> list[Finding]:
    url = urlsplit(str(r.get("vllm_url", "")))
    ns = w["metadata"].get("namespace")
    problem = _service_port(objs, ns, url.hostname or "", url.port or 80)
    if problem:
        return [Finding(ref(w), f"vllm_url {problem}")]
    svc = index(objs)[("Service", ns, (url.hostname or "").split(".")[0])]
    sel = svc["spec"].get("selector") or {}
    servers = [d for d in objs if d.get("kind") == "Deployment" and d["metadata"].get("namespace") == ns
               and all(((pod_template(d).get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in sel.items())]
    out = []
    for d in servers:
        if int(d["spec"].get("replicas", 1)) < 1:
            out.append(Finding(ref(w), f"policy vllm but {ref(d)} has 0 replicas"))
        want = r.get("vllm_model") or r.get("model")
        if _vllm_model(d) != want:
            out.append(Finding(ref(w), f"vLLM serves {_vllm_model(d)!r} but the workers ask for {want!r}"))
        rank = _arg(_vllm_args(d) or [], "--max-lora-rank")
        if lora_rank is not None and (rank is None or int(rank) < lora_rank):
            out.append(Finding(ref(d), f"--max-lora-rank {rank} is below the trainer's lora_rank {lora_rank}: "
                                       "vLLM would refuse every adapter"))
        vc: Obj = next(iter((pod_template(d).get("spec") or {}).get("containers") or []), {})
        if _mount_claim(d, vc, str(r.get("adapter_store"))) != _mount_claim(w, c, str(r.get("adapter_store"))):
            out.append(Finding(ref(d), f"must mount the workers' adapter store at {r.get('adapter_store')} (lora_path)"))
    return out or ([] if servers else [Finding(ref(w), "policy vllm but the vllm Service selects no Deployment")])


def resolve_config_refs(objs: list[Obj]) -> list[Obj]:
    """A copy of ``objs`` in which every container env value taken from a key of a ConfigMap of the build
    (``valueFrom.configMapKeyRef``) is written in, as the pod will see it; other references stay placeholders."""
    data = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o.get("data") or {}
            for o in objs if o.get("kind") == "ConfigMap"}
    out = copy.deepcopy(objs)
    for w in out:
        if w.get("kind") not in WORKLOADS:
            continue
        for c in (pod_template(w).get("spec") or {}).get("containers") or []:
            for e in c.get("env") or []:
                key_ref = (e.get("valueFrom") or {}).get("configMapKeyRef") or {}
                value = data.get((w["metadata"].get("namespace"), key_ref.get("name")), {}).get(key_ref.get("key"))
                if value is not None:
                    e.pop("valueFrom")
                    e["value"] = value
    return out


def check_streamgrpo(objs: list[Obj]) -> tuple[list[Finding], list[str]]:
    """streamgrpo-specific configuration checks of one build; returns (findings, notes)."""
    objs = resolve_config_refs(objs)
    cms = [o for o in objs if o.get("kind") == "ConfigMap" and o["metadata"].get("name") == CONFIG_MAP]
    pairs = _streamgrpo_containers(objs)
    if not cms:
        return ([Finding("ConfigMap/" + CONFIG_MAP, "missing from the build")] if pairs else []), []
    text = (cms[0].get("data") or {}).get(CONFIG_KEY)
    if text is None:
        return [Finding(ref(cms[0]), f"has no key {CONFIG_KEY}")], []
    try:
        toml = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [Finding(ref(cms[0]), f"{CONFIG_KEY} is not valid TOML: {exc}")], []
    out = [Finding(ref(cms[0]), f"unknown section [{s}] (known: {', '.join(SECTION_MODELS)})")
           for s in toml if s not in SECTION_MODELS]
    for w, c in pairs:
        mounts = {m.get("mountPath") for m in c.get("volumeMounts") or []}
        cfg = _env(c).get("STREAMGRPO_CONFIG", "")
        if str(Path(cfg).parent) not in mounts:
            out.append(Finding(ref(w), f"STREAMGRPO_CONFIG={cfg!r} is not on a mounted volume"))
    found, notes, loaded = _load_models(text, pairs)
    return (out + found + _check_wiring(objs, toml, pairs, loaded) + _check_base_model(objs, pairs, loaded)
            + ksandbox.check_pods(pairs, loaded) + _check_metrics(pairs, loaded)
            + _check_keda(objs, pairs, loaded) + _check_pacing(objs, pairs, loaded)), notes


MODEL_CONFIGMAP, MODEL_KEY = "streamgrpo-model", "base_model"
#: The bundled CPU alias (models/base.py: DEFAULT_BASE_MODEL): converted from the image's GGUF by streamgrpo, unknown to vLLM.
BUNDLED_ALIAS = "smollm2-135m-instruct"


def _loads(objs: list[Obj], pairs: list[tuple[Obj, Obj]], loaded: Loaded) -> list[tuple[Obj, str, str]]:
    """(workload, what, base model) for every workload that loads a model or asks vLLM for one."""
    out: list[tuple[Obj, str, str]] = []
    for w, c in pairs:
        command = str((c.get("args") or [""])[0])
        if command in ksandbox.TOOL_COMMANDS and (id(c), "rollout") in loaded:
            cfg = loaded[(id(c), "rollout")]
            args = [str(a) for a in c.get("args") or []]
            if command == "serve":  # serve forces the local policy; --model overrides [rollout] model
                out.append((w, "serve [rollout] model", _arg(args, "--model") or cfg.model))
            elif cfg.policy == "vllm":
                out.append((w, f"{command} [rollout] vllm_model/model (asked of vLLM)", cfg.vllm_model or cfg.model))
            else:
                out.append((w, f"{command} [rollout] model", cfg.model))
        elif command == "trainer" and (id(c), "trainer") in loaded:
            out.append((w, "trainer [trainer] base_model", loaded[(id(c), "trainer")].base_model))
    for d in objs:
        if d.get("kind") in WORKLOADS and _vllm_args(d) is not None:
            out.append((d, "vLLM --served-model-name/--model", str(_vllm_model(d))))
    return out


def _check_base_model(objs: list[Obj], pairs: list[tuple[Obj, Obj]], loaded: Loaded) -> list[Finding]:
    """Every model-loading workload loads the build's one base model (see the module docstring)."""
    cms = [o for o in objs if o.get("kind") == "ConfigMap" and MODEL_KEY in (o.get("data") or {})
           and re.fullmatch(re.escape(MODEL_CONFIGMAP) + r"(-[a-z0-9]+)?", o["metadata"]["name"])]
    loads = _loads(objs, pairs, loaded)
    if cms:
        want, source = str(cms[0]["data"][MODEL_KEY]), f"ConfigMap {MODEL_CONFIGMAP} (key {MODEL_KEY})"
    else:
        trainer = [m for w, what, m in loads if what.startswith("trainer")]
        if not trainer:
            return []
        want, source = trainer[0], "the trainer's [trainer] base_model"
    out = [Finding(ref(w), f"{what} is {model!r}, not the one base model {want!r} of {source}: every workload that "
                           f"loads a model reads it from {MODEL_CONFIGMAP}; set it there, not per workload")
           for w, what, model in loads if model != want]
    for d in objs:
        if (d.get("kind") in WORKLOADS and _vllm_args(d) is not None and int((d.get("spec") or {}).get("replicas", 1))
                and str(_arg(_vllm_args(d) or [], "--model")).lower() == BUNDLED_ALIAS):
            out.append(Finding(ref(d), f"vLLM runs with --model {BUNDLED_ALIAS}, the bundled CPU alias that only "
                                       f"streamgrpo resolves: set {MODEL_CONFIGMAP} to a hub id (or a path) vLLM loads"))
    return out


def _section(c: Obj) -> str | None:
    return COMMAND_SECTION.get(str((c.get("args") or [""])[0]))


def _check_metrics(pairs: list[tuple[Obj, Obj]], loaded: Loaded) -> list[Finding]:
    """Each service container declares port `metrics` = its metrics_port; the scrape annotation agrees."""
    out: list[Finding] = []
    for w, c in pairs:
        section = _section(c)
        cfg = loaded.get((id(c), section or ""))
        if cfg is None or not getattr(cfg, "metrics_port", 0):
            continue
        want = int(cfg.metrics_port)
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        if ports.get("metrics") != want:
            out.append(Finding(ref(w), f"container {c['name']!r} must declare port `metrics` = [{section}] "
                                       f"metrics_port {want} (declares {ports.get('metrics')})"))
        ann = (pod_template(w).get("metadata") or {}).get("annotations") or {}
        if "prometheus.io/port" in ann and str(ann["prometheus.io/port"]) != str(want):
            out.append(Finding(ref(w), f"prometheus.io/port {ann['prometheus.io/port']} != metrics_port {want}"))
    return out


def _check_keda(objs: list[Obj], pairs: list[tuple[Obj, Obj]], loaded: Loaded) -> list[Finding]:
    """A ScaledObject's kafka triggers watch the group and bootstrap its target actually uses."""
    out: list[Finding] = []
    for so in (o for o in objs if o.get("kind") == "ScaledObject"):
        target = ((so.get("spec") or {}).get("scaleTargetRef") or {}).get("name")
        mine = [(w, c) for w, c in pairs if w["metadata"]["name"] == target]
        for trig in (so.get("spec") or {}).get("triggers") or []:
            if trig.get("type") != "kafka" or not mine:
                continue
            meta = trig.get("metadata") or {}
            w, c = mine[0]
            cfg = loaded.get((id(c), _section(c) or ""))
            group = getattr(cfg, "consumer_group", None)
            if group is not None and meta.get("consumerGroup") != group:
                out.append(Finding(ref(so), f"watches consumer group {meta.get('consumerGroup')!r} but {ref(w)} "
                                            f"consumes as {group!r}"))
            topics = str(((w["metadata"].get("annotations") or {}).get(SCALED_BY)) or "").split(",")
            if meta.get("topic") not in [t.strip() for t in topics]:
                out.append(Finding(ref(so), f"watches topic {meta.get('topic')!r} but {ref(w)} consumes {topics} "
                                            f"({SCALED_BY})"))
            for hostport in str(meta.get("bootstrapServers", "")).split(","):
                host, _, port = hostport.strip().rpartition(":")
                problem = _service_port(objs, so["metadata"].get("namespace"), host, int(port or 0))
                if problem:
                    out.append(Finding(ref(so), f"bootstrapServers {problem}"))
    return out


PACED_TOPIC = "rollout-requests"


def _check_pacing(objs: list[Obj], pairs: list[tuple[Obj, Obj]], loaded: Loaded) -> list[Finding]:
    """Admission, the trainer and KEDA's rollout scaler are sized from one another (see the module docstring)."""
    paced = {section: (w, loaded[(id(c), section)]) for w, c in pairs
             for section in ("streams", "trainer", "rollout") if _section(c) == section and (id(c), section) in loaded}
    if "streams" not in paced:
        return []
    streams_w, streams = paced["streams"]
    out: list[Finding] = []
    if "trainer" in paced:
        trainer_w, trainer = paced["trainer"]
        for field in ("samples_per_step", "max_staleness"):
            if getattr(streams, field) != getattr(trainer, field):
                out.append(Finding(ref(streams_w), f"[loop] {field} {getattr(streams, field)} != the trainer's "
                                                   f"{getattr(trainer, field)} ({ref(trainer_w)}): admission paces "
                                                   "groups by the trainer's step; set it once, in [loop]"))
    staleness, step = int(streams.max_staleness), int(streams.samples_per_step)
    room = staleness * step  # the budget (1 + max_staleness) x step, less one step waiting for the trainer
    for so in (o for o in objs if o.get("kind") == "ScaledObject"):
        spec = so.get("spec") or {}
        for trig in spec.get("triggers") or []:
            meta = trig.get("metadata") or {}
            if trig.get("type") != "kafka" or meta.get("topic") != PACED_TOPIC:
                continue
            threshold = int(meta.get("lagThreshold") or 0)
            most = int(spec.get("maxReplicaCount", 100))
            if "rollout" in paced:
                out += _check_groups_in_flight(so, most, streams_w, int(streams.max_groups_in_flight),
                                               int(paced["rollout"][1].concurrency))
            if most * threshold > room:
                need = -(-most * threshold // staleness) if staleness else None
                fix = (f"raise [loop] samples_per_step to {need}" if need
                       else "max_staleness 0 leaves no room: raise it to 1")
                out.append(Finding(ref(so), f"maxReplicaCount {most} x lagThreshold {threshold} = {most * threshold} "
                                            f"requests in flight, but admission leaves the workers {room} (max_staleness "
                                            f"{staleness} x samples_per_step {step}: its budget (1 + max_staleness) x "
                                            f"samples_per_step less one step waiting for the trainer): room for "
                                            f"{room // threshold if threshold else 0} worker batch(es), the other "
                                            f"workers add nothing; {fix}, or lower lagThreshold or maxReplicaCount"))
    return out


def _check_groups_in_flight(so: Obj, most: int, streams_w: Obj, groups: int, concurrency: int) -> list[Finding]:
    """Admission starts at most ``[streams] max_groups_in_flight`` groups at once; each of the ``most`` workers KEDA may
    start runs ``[rollout] concurrency`` of them: fewer groups than that leave workers idle and the lag under the
    next worker's threshold."""
    if groups >= most * concurrency:
        return []
    return [Finding(ref(streams_w), f"[streams] max_groups_in_flight {groups}: admission starts at most {groups} "
                                    f"groups at once, but {ref(so)} may start {most} workers of [rollout] concurrency "
                                    f"{concurrency} ({most * concurrency} groups): "
                                    f"{most - -(-groups // concurrency)} worker(s) would get nothing; set it to "
                                    f"{most * concurrency} (maxReplicaCount x concurrency)")]
