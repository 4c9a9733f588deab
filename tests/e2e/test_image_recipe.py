"""The image runs, without a container runtime: its exact install recipe, then every service of the
dev-cpu overlay started with that overlay's settings.

1. The build context is what the Dockerfile's build stage COPYs (parsed from the Dockerfile), copied
   into a temporary directory; ``k8s/image/install.sh`` (the Dockerfile's only RUN of the build stage)
   installs it into a fresh virtualenv. The one difference from ``docker build``: torch comes from
   pip's configured sources instead of the CPU wheel index (no network to it here).
2. ``kubectl kustomize k8s/overlays/dev-cpu`` is built; the ConfigMap's TOML and each streamgrpo
   container's args and environment are used as they are, with the pod's paths (/etc/streamgrpo,
   /var/cache/streamgrpo, /var/lib/streamgrpo, /work) mapped into a temporary directory, the Kafka
   bootstrap pointed at the test broker and a private topic prefix. The overlay's Kafka security settings
   (SASL_PLAINTEXT, with the principal's password from a Secret the kafka-acl component expects) are
   replaced by the test broker's, which has no SASL; the ACL wiring itself is checked offline by
   ``tests/unit/test_k8s_manifests.py``.
3. The topics-ensure Job's command runs to completion; then every Deployment of the overlay that runs the
   image -- streams, judge, rollout, trainer, evaluator and mcp (``streamgrpo serve``) -- is started from the new
   virtualenv's ``streamgrpo`` entry point with its own args and environment (values the pod takes from a ConfigMap,
   such as the one base model, resolved as the kubelet does). Each worker must be running with its main loop
   beating the heartbeat file, pass the image's readiness and liveness probes, and (rollout, trainer, evaluator) have
   converted the bundled SmolLM2 into the model cache: the model is loaded. ``serve`` has no heartbeat: its probes
   are TCP on the MCP port, which opens only after the model and the tools are built, and it must answer HTTP there.

Not run here: ``docker build`` itself (tests/e2e/test_image_container.py builds and runs the image with podman),
pulling base images, a cluster.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from streamgrpo.config import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "k8s" / "image" / "Dockerfile"
# A fresh virtualenv installs torch and the ML stack: about 10 minutes on the dev machine.
pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.model, pytest.mark.timeout(2700)]


def build_context(dest: Path) -> list[str]:
    """Copy what the build stage COPYs into ``dest``; returns the copied paths."""
    text = DOCKERFILE.read_text()
    stage = text[text.index("AS build"):text.index("\nFROM ", text.index("AS build"))]
    copied = []
    for line in re.findall(r"^COPY (.+)$", stage, re.M):
        *sources, _target = line.split()
        for src in sources:
            path = ROOT / src
            (dest / src).parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, dest / src, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, dest / src)
            copied.append(src)
    assert "install.sh" in stage and copied, "the build stage must COPY the sources and run install.sh"
    return copied


def overlay() -> list[dict]:
    """The dev-cpu build, with every env value a pod takes from a ConfigMap of the build written in."""
    kubectl = Path(sys.executable).parent / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(ROOT / "k8s" / "overlays" / "dev-cpu")],
                         capture_output=True, text=True, check=True).stdout
    sys.path.insert(0, str(ROOT / "k8s" / "tools"))
    try:
        import ksettings
    finally:
        sys.path.remove(str(ROOT / "k8s" / "tools"))
    return ksettings.resolve_config_refs([d for d in yaml.safe_load_all(out) if d])


POD_PATHS = {"/etc/streamgrpo": "etc", "/var/cache/streamgrpo": "cache", "/var/lib/streamgrpo": "lib",
             "/work": "work", "/tmp": "tmp"}
_POD_PATH = re.compile(r"(?<![\w/.])(" + "|".join(map(re.escape, POD_PATHS)) + r")(?=/|\b|$)")


def _map(value: str, base: Path) -> str:
    """The pod's paths -> directories under ``base`` (one pass: a mapped path is never mapped again)."""
    return _POD_PATH.sub(lambda m: str(base / POD_PATHS[m.group(1)]), value)


# The connection's security is the test broker's, not the overlay's (see the module docstring).
_BROKER_SECURITY = ("STREAMGRPO_KAFKA__SECURITY_PROTOCOL", "STREAMGRPO_KAFKA__SASL_")


def container_env(container: dict, base: Path, kafka: KafkaSettings, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    env.update({e["name"]: _map(str(e["value"]), base) for e in container.get("env") or [] if "value" in e
                and not e["name"].startswith(_BROKER_SECURITY)})
    env["STREAMGRPO_KAFKA__BOOTSTRAP"] = kafka.bootstrap or ""
    env["STREAMGRPO_KAFKA__TOPIC_PREFIX"] = prefix
    env["STREAMGRPO_KAFKA__SESSION_TIMEOUT_MS"] = "3000"
    env["STREAMGRPO_HEARTBEAT_FILE"] = str(base / "tmp" / f"heartbeat-{container['name']}")
    return env


def _wait_loaded(proc: subprocess.Popen, beat: Path, model_dir: Path | None, timeout_s: float) -> str:
    """'' once the main loop beats (second beat after the CLI's first) and the model is converted."""
    deadline, first = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        if beat.exists():
            first = first or beat.stat().st_mtime
            loaded = model_dir is None or any(model_dir.glob("*/config.json"))
            if beat.stat().st_mtime > first and loaded:
                return ""
        time.sleep(1.0)
    return f"not loaded within {timeout_s:.0f}s"


def test_image_recipe_starts_every_service(tmp_path: Path, kafka: KafkaSettings) -> None:
    src, venv = tmp_path / "src", tmp_path / "venv"
    build_context(src)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMGRPO_", "VIRTUAL_ENV"))}
    subprocess.run(["sh", str(src / "k8s" / "image" / "install.sh"), str(venv), str(src)], check=True, env=env,
                   timeout=1500)
    start_services(venv, tmp_path, kafka)


#: The overlay's Deployments that run the image; mcp is `streamgrpo serve` (no heartbeat: TCP probes).
SERVICES = ("streams", "judge", "rollout", "trainer", "evaluator", "mcp")
LOADS_MODEL = ("rollout", "trainer", "evaluator")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_args(args: list[str], port: int) -> list[str]:
    """The mcp container's args, listening on 127.0.0.1:``port`` instead of the pod's 0.0.0.0:8765."""
    out = list(args)
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        out[out.index(flag) + 1] = value
    return out


def _wait_http(proc: subprocess.Popen, port: int, timeout_s: float) -> str:
    """'' once the port accepts TCP (the pod's probes) and answers HTTP on /mcp."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 "):
                    return ""
        except OSError:
            pass
        time.sleep(1.0)
    return f"port {port} not answering HTTP within {timeout_s:.0f}s"


def start_services(venv: Path, tmp_path: Path, kafka: KafkaSettings) -> None:
    """Run the overlay's topics Job, start its six services from ``venv``; assert each loads."""
    base = tmp_path / "pod"
    objs = overlay()
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "streamgrpo-config")
    for d in ("etc", "cache", "lib/adapters", "lib/archive", "work", "tmp"):
        (base / d).mkdir(parents=True, exist_ok=True)
    (base / "etc" / "streamgrpo.toml").write_text(_map(cm["data"]["streamgrpo.toml"], base))
    prefix = f"img{uuid.uuid4().hex[:8]}."
    workloads = {o["metadata"]["name"]: o for o in objs if o["kind"] in ("Deployment", "Job")}
    ensure = workloads["topics-ensure"]["spec"]["template"]["spec"]["containers"][0]
    done = subprocess.run([str(venv / "bin" / "streamgrpo"), *ensure["args"]], capture_output=True, text=True,
                          env=container_env(ensure, base, kafka, prefix), timeout=120, cwd=base / "tmp")
    assert done.returncode == 0, done.stderr[-2000:]
    procs: dict[str, tuple[subprocess.Popen, dict[str, str], dict]] = {}
    logs = []
    try:
        mcp_port = _free_port()
        for name in SERVICES:
            c = workloads[name]["spec"]["template"]["spec"]["containers"][0]
            env = container_env(c, base, kafka, prefix)
            cwd = Path(_map(c.get("workingDir", "/tmp"), base))
            args = _serve_args(c["args"], mcp_port) if name == "mcp" else c["args"]
            log = open(tmp_path / f"{name}.log", "w")
            logs.append(log)
            procs[name] = (subprocess.Popen([str(venv / "bin" / "streamgrpo"), *args], env=env, cwd=cwd,
                                            stdout=log, stderr=subprocess.STDOUT), env, c)
        models = base / "cache" / "models"
        for name, (proc, env, c) in procs.items():
            if name == "mcp":
                problem = _wait_http(proc, mcp_port, timeout_s=600)
                assert problem == "", f"{name}: {problem}\n" + (tmp_path / f"{name}.log").read_text()[-3000:]
                continue
            problem = _wait_loaded(proc, Path(env["STREAMGRPO_HEARTBEAT_FILE"]),
                                   models if name in LOADS_MODEL else None, timeout_s=600)
            assert problem == "", f"{name}: {problem}\n" + (tmp_path / f"{name}.log").read_text()[-3000:]
            for probe in (c["readinessProbe"]["exec"]["command"], c["livenessProbe"]["exec"]["command"]):
                argv = [str(venv / "bin" / probe[0]), *probe[1:]]
                ok = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
                assert ok.returncode == 0, f"{name}: {probe}: {ok.stderr}"
    finally:
        for proc, _, _ in procs.values():
            proc.terminate()
        for proc, _, _ in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()
