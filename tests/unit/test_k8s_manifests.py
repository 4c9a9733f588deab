"""k8s/: generated topics in sync with the catalog, every overlay builds and passes the validator,
the Python builder agrees with kubectl, and the validator rejects broken manifests.

No cluster and no network: builds use ``kubectl kustomize`` where kubectl is installed and the
Python subset builder everywhere (the comparison test is skipped without kubectl).
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import socket
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
TARGETS = ["base", "overlays/dev-cpu", "overlays/gpu"]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, str(K8S / "tools"))
validate = _load("k8s_validate", K8S / "validate.py")
gen_topics = _load("k8s_gen_topics", K8S / "gen_topics.py")
probe = _load("k8s_probe", K8S / "image" / "probe.py")
kbuild, kchecks, kmodels = validate.kbuild, validate.kchecks, validate.kmodels


@pytest.fixture(scope="module")
def dev_objs() -> list[dict]:
    return kbuild.build_python(K8S / "overlays" / "dev-cpu")


def _find(objs: list[dict], kind: str, name: str) -> dict:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def _messages(objs: list[dict]) -> str:
    findings, _ = validate.validate_objects(objs)
    return "\n".join(str(f) for f in findings)


# --- generated topics -------------------------------------------------------------------------

def test_k8s_topics_match_catalog() -> None:
    from streamgrpo.topics.catalog import TOPICS

    assert gen_topics.diff() == [], "run `python k8s/gen_topics.py`"
    built = {o["spec"]["topicName"]: o for o in kbuild.build_python(K8S / "base") if o["kind"] == "KafkaTopic"}
    assert set(built) == {t.name for t in TOPICS}
    for t in TOPICS:
        spec = built[t.name]["spec"]
        assert (spec["partitions"], spec["replicas"]) == (t.partitions, t.replication)
        assert spec["config"] == t.config()


def test_k8s_topics_drift_is_detected(tmp_path: Path) -> None:
    gen_topics.write(tmp_path)
    assert gen_topics.diff(tmp_path) == []
    f = tmp_path / "rewards.yaml"
    f.write_text(f.read_text().replace("partitions: 3", "partitions: 4"))
    (tmp_path / "stale.yaml").write_text("kind: KafkaTopic\n")
    assert set(gen_topics.diff(tmp_path)) == {"rewards.yaml", "stale.yaml (not generated)"}


# --- every overlay ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_k8s_overlay_builds_and_validates(target: str) -> None:
    objs = kbuild.build_python(K8S / target)
    findings, _ = validate.validate_objects(objs)
    assert [str(f) for f in findings] == []
    kinds = {o["kind"] for o in objs}
    assert {"Kafka", "KafkaNodePool", "KafkaTopic", "Deployment", "HorizontalPodAutoscaler",
            "ConfigMap", "PersistentVolumeClaim", "Service", "Namespace"} <= kinds


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
@pytest.mark.parametrize("target", TARGETS)
def test_k8s_python_builder_matches_kubectl(target: str) -> None:
    assert validate.compare_builders(K8S / target) == []


def test_k8s_overlays_differ_where_intended() -> None:
    dev = kbuild.build_python(K8S / "overlays" / "dev-cpu")
    gpu = kbuild.build_python(K8S / "overlays" / "gpu")
    assert _find(dev, "KafkaNodePool", "dual-role")["spec"]["replicas"] == 1
    assert _find(dev, "Deployment", "vllm")["spec"]["replicas"] == 0
    vllm = _find(gpu, "Deployment", "vllm")
    assert vllm["spec"]["replicas"] == 1
    c = vllm["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "vllm/vllm-openai:v0.8.5" and "--enable-lora" in c["args"]
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in c["env"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in
           _find(gpu, "Deployment", "rollout")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMGRPO_ROLLOUT__POLICY"] == "vllm"
    trainer = _find(gpu, "Deployment", "trainer")
    assert trainer["spec"]["strategy"]["type"] == "Recreate" and trainer["spec"]["replicas"] == 1
    assert all(t["spec"]["replicas"] == 3 for t in gpu if t["kind"] == "KafkaTopic")
    # gpu: the Topic Operator alone creates topics (replication 3); dev keeps the ensure Job.
    assert not [o for o in gpu if o["kind"] == "Job"]
    assert _find(dev, "Job", "topics-ensure")["spec"]["template"]["spec"]["containers"][0]["args"] == ["topics", "ensure"]


def test_k8s_third_party_is_pinned() -> None:
    assert validate.check_third_party() == []
    text = (K8S / "third-party" / "strimzi" / "kustomization.yaml").read_text()
    assert "releases/download/0.45.0/strimzi-cluster-operator-0.45.0.yaml" in text


def test_k8s_validate_cli_passes() -> None:
    assert validate.main(["--builder", "python"]) == 0


# --- the validator can fail -------------------------------------------------------------------

def _container(objs: list[dict], name: str) -> dict:
    return _find(objs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("mutate, expected", [
    (lambda o: _container(o, "judge").update(image="ghcr.io/streamgrpo/streamgrpo:latest"), "floating tag 'latest'"),
    (lambda o: _container(o, "judge").update(image="ghcr.io/streamgrpo/streamgrpo"), "has no tag"),
    (lambda o: _find(o, "Deployment", "streams")["spec"]["template"]["spec"]["volumes"][0]["configMap"]
     .update(name="nope"), "ConfigMap 'nope' is referenced but not part of the build"),
    (lambda o: _find(o, "Deployment", "trainer")["spec"]["template"]["spec"]["volumes"][-1]["persistentVolumeClaim"]
     .update(claimName="gone"), "PersistentVolumeClaim 'gone' is referenced"),
    (lambda o: _container(o, "judge")["env"][0].update(valueFrom={"secretKeyRef": {"name": "s", "key": "k"}}),
     "Secret 's' is referenced but not part of the build"),
    (lambda o: _find(o, "Deployment", "judge")["spec"]["selector"]["matchLabels"].update(x="y"), "does not match template"),
    (lambda o: _container(o, "rollout").pop("readinessProbe"), "no readinessProbe"),
    (lambda o: _container(o, "rollout")["resources"].pop("requests"), "no resources.requests.cpu"),
    (lambda o: _container(o, "rollout")["securityContext"]["capabilities"].update(drop=[]), "drop does not include ALL"),
    (lambda o: _container(o, "rollout")["securityContext"].update(readOnlyRootFilesystem=False), "readOnlyRootFilesystem"),
    (lambda o: _find(o, "HorizontalPodAutoscaler", "rollout")["spec"].update(maxReplicas=9), "only 3 partitions"),
    (lambda o: _find(o, "KafkaTopic", "rewards")["spec"].update(replicas=3), "exceed the 1 broker"),
    (lambda o: _find(o, "Service", "vllm")["spec"]["ports"][0].update(targetPort="grpc"), "targetPort 'grpc'"),
    (lambda o: _container(o, "judge").update(readinessProb={}), "readinessProb is unknown to V1Deployment"),
    (lambda o: _find(o, "ConfigMap", "streamgrpo-config")["data"].update(
        {"streamgrpo.toml": o_toml(o).replace('estimator = "grpo"', 'estimater = "grpo"')}), "estimater"),
    (lambda o: _find(o, "ConfigMap", "streamgrpo-config")["data"].update(
        {"streamgrpo.toml": o_toml(o).replace(":9092", ":9094")}), "has no listener on 9094"),
    (lambda o: _container(o, "rollout")["env"].append({"name": "STREAMGRPO_ROLLOUT__POLICY", "value": "vllm"}),
     "policy vllm but Deployment/streamgrpo/vllm has 0 replicas"),
    (lambda o: _container(o, "trainer")["env"].append({"name": "STREAMGRPO_TRAINER__BASE_MODEL", "value": "other"}),
     "!= trainer base_model 'other'"),
    (lambda o: _container(o, "rollout")["env"].append({"name": "STREAMGRPO_LOOP__ADAPTER_STORE", "value": "/elsewhere"}),
     "rollout [loop] adapter_store '/elsewhere' != the trainer's"),
    (lambda o: _find(o, "ConfigMap", "streamgrpo-config")["data"].update(
        {"streamgrpo.toml": o_toml(o) + '\n[trainr]\nlr = 1\n'}), "unknown section(s) [trainr]"),
    (lambda o: _container(o, "judge")["env"].append({"name": "STREAMGRPO_JUDGE_LLM_API_KEY", "value": "k"}),
     "unknown environment variable(s) STREAMGRPO_JUDGE_LLM_API_KEY"),
])
def test_k8s_validator_rejects(dev_objs: list[dict], baseline: str, mutate, expected: str) -> None:
    assert expected not in baseline  # the finding comes from the mutation, not from the manifests
    objs = copy.deepcopy(dev_objs)
    mutate(objs)
    assert expected in _messages(objs)


@pytest.fixture(scope="module")
def baseline(dev_objs: list[dict]) -> str:
    return _messages(dev_objs)


def o_toml(objs: list[dict]) -> str:
    return _find(objs, "ConfigMap", "streamgrpo-config")["data"]["streamgrpo.toml"]


def test_k8s_validate_cli_fails_on_latest_overlay(tmp_path: Path) -> None:
    overlay = tmp_path / "bad"
    overlay.mkdir()
    base = (K8S / "base").resolve()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [str(base)],
        "images": [{"name": "ghcr.io/streamgrpo/streamgrpo", "newTag": "latest"}]}))
    assert validate.main(["--builder", "python", "--skip-topics", str(overlay)]) == 1


def test_k8s_python_builder_refuses_unsupported(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("configMapGenerator:\n  - name: x\n    literals: [a=b]\n")
    with pytest.raises(kbuild.BuildError, match="configMapGenerator"):
        kbuild.build_python(tmp_path)


def test_k8s_strategic_merge_keys_and_json_patch() -> None:
    base = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}],
                                           "tolerations": [{"key": "k"}]}}}}
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}],
                                            "tolerations": [{"key": "z"}]}}}}
    out = kbuild.strategic_merge(base, patch, builtin=True)
    pod = out["spec"]["template"]["spec"]
    assert [e["name"] for e in pod["containers"][0]["env"]] == ["Y", "X"]  # kustomize's order
    assert pod["tolerations"] == [{"key": "z"}]  # no merge key: replaced
    patched = kbuild.json6902(base, [{"op": "replace", "path": "/metadata/name", "value": "e"},
                                     {"op": "add", "path": "/spec/replicas", "value": 2}])
    assert patched["metadata"]["name"] == "e" and patched["spec"]["replicas"] == 2
    with pytest.raises(kbuild.BuildError):
        kbuild.json6902(base, [{"op": "replace", "path": "/spec/nothere", "value": 1}])


# --- the exec probe of the image --------------------------------------------------------------

def test_k8s_probe_ready_against_a_real_socket(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(f'[kafka]\nbootstrap = "127.0.0.1:{port}"\n')
    try:
        assert probe.main(["ready"], {"STREAMGRPO_CONFIG": str(cfg)}) == 0
    finally:
        server.close()
    assert probe.main(["ready", "--timeout", "0.5"], {"STREAMGRPO_CONFIG": str(cfg)}) == 1
    assert probe.main(["ready"], {}) == 1  # nothing configured
    cfg.write_text("[kafka\n")
    assert probe.main(["ready"], {"STREAMGRPO_CONFIG": str(cfg)}) == 1  # broken TOML


def test_k8s_probe_live_heartbeat(tmp_path: Path) -> None:
    beat = tmp_path / "hb"
    env = {"STREAMGRPO_HEARTBEAT_FILE": str(beat)}
    assert probe.main(["live"], env) == 0  # not written yet
    beat.write_text("")
    assert probe.main(["live", "--max-age", "60"], env) == 0
    old = time.time() - 600
    import os

    os.utime(beat, (old, old))
    assert probe.main(["live", "--max-age", "60"], env) == 1
