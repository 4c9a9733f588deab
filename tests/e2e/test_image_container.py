"""The shipped image in a real container: built from k8s/image/Dockerfile with podman + runc, its entry points run
under the shipped seccomp profile with the pod's restrictions, and one python-tool call goes through the jail.

1. A base image from Debian's own packages (no registry): ``debootstrap --variant=minbase bookworm``, ``podman
   import``, then python3 + python3-venv on top -- the stand-in for ``python:3.11-slim-bookworm`` (Debian 12's
   python3 is 3.11); or ``STREAMGRPO_TEST_PYTHON_IMAGE``. pip inside the build uses this machine's pip
   configuration (its config files, certificates and local wheel folders are mounted into the build).
2. ``podman build -f k8s/image/Dockerfile --build-arg PYTHON_IMAGE=<that>``: the shipped recipe, unchanged.
3. Every container runs as the pods do: uid 10001, all capabilities dropped, no-new-privileges, read-only root,
   a tmpfs /tmp, and seccomp = ``k8s/node/streamgrpo-sandbox.seccomp.json`` (or containerd's RuntimeDefault,
   rebuilt as data by ``k8s/node/gen_seccomp.py``, to show the jail refusing under it). runc, with
   ``--cgroup-manager=cgroupfs`` (crun refuses a hybrid cgroup layout) and explicit ulimits.

Found here: the jail did not start in a container whose ``/proc/sys`` is read-only, which is what Kubernetes
(containerd, CRI-O), podman and docker mount for every unprivileged container: bwrap's ``--disable-userns`` writes
``/proc/sys/user/max_user_namespaces`` and failed with EROFS. The jail now leaves that flag out where ``/proc/sys``
is read-only and refuses new namespaces by its own seccomp filter (sandbox/seccomp.py point 5, checked by its
probe), so every container below runs with ``/proc/sys`` as a pod mounts it.

Not covered: AppArmor (this kernel has none), a kubelet (no cluster here), the CUDA image.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from streamgrpo.config import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "k8s" / "node" / "streamgrpo-sandbox.seccomp.json"
IMAGE = "localhost/streamgrpo-test:0.1.0"
BASE = "localhost/streamgrpo-test-python:3.11-bookworm"
RUNTIME = ["--runtime", "runc", "--cgroup-manager=cgroupfs"]
ULIMITS = ["--ulimit", "nofile=10000:10000", "--ulimit", "nproc=10000:10000"]
POD = ["--user", "10001:10001", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
       "--tmpfs", "/tmp"]
CALL = ("from streamgrpo.rollout.tools.python_sandbox import PythonSandbox\n"
        "print(PythonSandbox().run({'code': 'import math\\nprint(math.factorial(10))'}))\n")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def _recipe() -> ModuleType:
    """tests/e2e/test_image_recipe.py: the overlay build (ConfigMap values resolved) and serve's args."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("image_recipe_for_container", Path(__file__).with_name(
        "test_image_recipe.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _podman(*args: str, timeout: float = 600, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["podman", *RUNTIME, *args], capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    if check and proc.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])}... exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def _require_podman() -> None:
    missing = [t for t in ("podman", "runc") if shutil.which(t) is None]
    if missing:
        if os.environ.get("STREAMGRPO_TEST_REQUIRE_PODMAN") == "1":
            pytest.fail(f"{missing} not installed (apt-get install podman runc debootstrap)")
        pytest.skip(f"{missing} not installed: apt-get install -y podman runc debootstrap "
                    "(STREAMGRPO_TEST_REQUIRE_PODMAN=1 makes this a failure)")


def _exists(image: str) -> bool:
    return _podman("image", "exists", image, check=False).returncode == 0


def _pip_mounts() -> list[str]:
    """This machine's pip configuration, for pip inside the build: config files, certificates, local wheel dirs."""
    paths = {"/etc/pip.conf", "/etc/xdg/pip", str(Path.home() / ".config" / "pip"), "/etc/ssl/certs"}
    listed = subprocess.run(["python3", "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        value = line.partition("=")[2].strip("'")
        for word in value.split():
            word = word.removeprefix("file://").rstrip("/")
            if word.startswith("/"):  # a local index's pages link to files beside its simple/ folder
                paths.add(str(Path(word).parent) if not Path(word).is_dir() or word.endswith("/simple") else word)
    out: list[str] = []
    for p in sorted(paths):
        if Path(p).exists():
            target = "/root/.config/pip" if p == str(Path.home() / ".config" / "pip") else p
            out += ["-v", f"{p}:{target}:ro"]
    return out


def _base_image(tmp: Path) -> str:
    image = os.environ.get("STREAMGRPO_TEST_PYTHON_IMAGE")
    if image:
        return image
    if _exists(BASE):
        return BASE
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        pytest.skip("no base image: set STREAMGRPO_TEST_PYTHON_IMAGE, or run as root with debootstrap installed")
    rootfs = tmp / "rootfs"
    subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs), "http://deb.debian.org/debian"],
                   check=True, capture_output=True, timeout=1800)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    _podman("import", "-", "localhost/streamgrpo-test-debian:bookworm", stdin=tar.stdout, timeout=600)
    tar.wait()
    (tmp / "Containerfile").write_text(
        "FROM localhost/streamgrpo-test-debian:bookworm\n"
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        "python3 python3-venv ca-certificates && rm -rf /var/lib/apt/lists/*\n")
    _podman("build", "--network", "host", *ULIMITS, "-t", BASE, str(tmp), timeout=1800)
    return BASE


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The shipped image, built from k8s/image/Dockerfile on the Debian base (layers cached between runs)."""
    _require_podman()
    base = _base_image(tmp_path_factory.mktemp("base"))
    _podman("build", "--network", "host", *ULIMITS, *_pip_mounts(), "--build-arg", f"PYTHON_IMAGE={base}",
            "--build-arg", f"TORCH_INDEX_URL={os.environ.get('STREAMGRPO_TEST_TORCH_INDEX_URL', '')}",
            "-f", str(ROOT / "k8s" / "image" / "Dockerfile"), "-t", IMAGE, str(ROOT), timeout=3000)
    return IMAGE


@pytest.fixture(scope="module")
def runtime_default(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import importlib.util

    spec = importlib.util.spec_from_file_location("k8s_gen_seccomp_e2e", ROOT / "k8s" / "node" / "gen_seccomp.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    path = tmp_path_factory.mktemp("seccomp") / "runtime-default.json"
    path.write_text(json.dumps(gen.runtime_default_profile()))
    return path


def _run(image: str, *args: str, seccomp: Path = PROFILE, unmask: bool = False, extra: tuple[str, ...] = (),
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    opts = ["--security-opt", f"seccomp={seccomp}", *(["--security-opt", "unmask=/proc/sys"] if unmask else [])]
    return _podman("run", "--rm", "--network", "none", *ULIMITS, *POD, *opts, *extra, image, *args,
                   timeout=timeout, check=False)


def test_the_image_runs_its_entry_points(image: str) -> None:
    done = _run(image, "--version")
    assert done.returncode == 0 and done.stdout.strip() == "streamgrpo, version 0.1.0", done.stderr
    probe = _run(image, "--help", extra=("--entrypoint", "streamgrpo-probe"))
    assert probe.returncode == 0 and "ready" in probe.stdout, probe.stderr
    bwrap = _run(image, "--version", extra=("--entrypoint", "bwrap"))
    assert bwrap.returncode == 0 and bwrap.stdout.startswith("bubblewrap "), bwrap.stderr


def test_the_jail_refuses_under_runtime_default_with_its_clear_error(image: str, runtime_default: Path) -> None:
    done = _run(image, "-c", CALL, seccomp=runtime_default, unmask=True, extra=("--entrypoint", "python"))
    assert done.returncode != 0
    assert "SandboxUnavailableError: bubblewrap could not set up the sandbox" in done.stderr
    assert "No permissions to create new namespace" in done.stderr  # clone with namespace flags refused
    assert "In a container the runtime's default seccomp and AppArmor profiles block" in done.stderr


def test_a_jailed_python_call_under_the_shipped_profile_with_proc_sys_writable(image: str) -> None:
    """The shipped seccomp profile is all the jail needs from seccomp: the real tool, probe included, as uid 10001."""
    done = _run(image, "-c", CALL, unmask=True, extra=("--entrypoint", "python"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ToolResult(output='3628800\\n', error=None" in done.stdout


def test_a_jailed_python_call_under_the_shipped_profile_as_a_pod_mounts_proc(image: str) -> None:
    done = _run(image, "-c", CALL, extra=("--entrypoint", "python"))
    assert "cannot open /proc/sys/user/max_user_namespaces: Read-only file system" not in done.stderr
    assert done.returncode == 0 and "ToolResult(output='3628800\\n', error=None" in done.stdout, done.stderr[-3000:]
    assert "bwrap's --disable-userns cannot be applied" in done.stdout + done.stderr  # said, not silent


# --- the entry points of the pods that build the jail, with the dev-cpu overlay's own settings ----------------------

@pytest.fixture(scope="module")
def pod_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Host folders for the pod's volumes: config (the overlay's TOML), model cache, adapter store, faust state."""
    overlay = _recipe().overlay

    base = tmp_path_factory.mktemp("pod")
    dirs = {p: base / p.strip("/").replace("/", "_") for p in
            ("/etc/streamgrpo", "/var/cache/streamgrpo", "/var/lib/streamgrpo/adapters", "/work")}
    for d in dirs.values():
        d.mkdir(parents=True)
        d.chmod(0o777)  # the container's uid 10001 writes the model cache
    cm = next(o for o in overlay() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "streamgrpo-config")
    (dirs["/etc/streamgrpo"] / "streamgrpo.toml").write_text(cm["data"]["streamgrpo.toml"])
    return dirs


@pytest.fixture(scope="module")
def broker() -> Iterator[KafkaSettings]:
    """A broker the containers reach on the host's network, with every catalog topic under a private prefix."""
    import tempfile

    from streamgrpo.topics.admin import ensure
    from streamgrpo.topics.broker import EmbeddedBroker

    external = os.environ.get("STREAMGRPO_TEST_BOOTSTRAP")
    if external:
        kafka = KafkaSettings(bootstrap=external, topic_prefix=f"ctr{uuid.uuid4().hex[:8]}.")
        ensure(kafka)
        yield kafka
        return
    with EmbeddedBroker(Path(tempfile.mkdtemp(prefix="streamgrpo-ctr-broker-"))) as b:
        kafka = KafkaSettings(bootstrap=b.bootstrap, topic_prefix=f"ctr{uuid.uuid4().hex[:8]}.",
                              session_timeout_ms=3000)
        ensure(kafka)
        yield kafka


def _container_env(container: dict, kafka: KafkaSettings) -> list[str]:
    """``-e`` options: the overlay container's env (ConfigMap values resolved; the test broker's security)."""
    env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e
           and not e["name"].startswith(("STREAMGRPO_KAFKA__SECURITY_PROTOCOL", "STREAMGRPO_KAFKA__SASL_"))}
    env.update({"STREAMGRPO_KAFKA__BOOTSTRAP": kafka.bootstrap or "", "STREAMGRPO_KAFKA__TOPIC_PREFIX":
                kafka.topic_prefix or "", "STREAMGRPO_KAFKA__SESSION_TIMEOUT_MS": "3000"})
    return [x for k, v in env.items() for x in ("-e", f"{k}={v}")]


def _wait_log(log: Path, proc: subprocess.Popen[str], needle: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if needle in log.read_text(errors="replace"):
            return ""
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        time.sleep(2.0)
    return f"no {needle!r} within {timeout_s:.0f}s"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.broker
@pytest.mark.model
@pytest.mark.parametrize("deployment", ["rollout", "evaluator", "mcp"])
def test_the_pods_that_build_the_jail_start_in_the_container(image: str, pod_dirs: dict[str, Path],
                                                             broker: KafkaSettings, tmp_path: Path,
                                                             deployment: str) -> None:
    """rollout, evaluator and serve start from the image with the overlay's args and env, under the shipped profile,
    build the python tool's jail (its probe through the real jail passes) and run their main loop. /proc/sys is
    as a pod mounts it (read-only; see the module docstring)."""
    recipe = _recipe()
    overlay, _serve_args = recipe.overlay, recipe._serve_args

    workloads = {o["metadata"]["name"]: o for o in overlay() if o["kind"] == "Deployment"}
    c = workloads[deployment]["spec"]["template"]["spec"]["containers"][0]
    port = _free_port()
    args = _serve_args(c["args"], port) if deployment == "mcp" else c["args"]
    mounts = [x for path, d in pod_dirs.items()
              for x in ("-v", f"{d}:{path}" + (":ro" if path in ("/etc/streamgrpo",) else ""))]
    name = f"streamgrpo-test-{deployment}-{uuid.uuid4().hex[:6]}"
    log = tmp_path / f"{deployment}.log"
    cmd = ["podman", *RUNTIME, "run", "--rm", "--name", name, "--network", "host", *ULIMITS, *POD,
           "--security-opt", f"seccomp={PROFILE}", *mounts,
           *_container_env(c, broker), image, *args]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        problem = _wait_log(log, proc, "python sandbox: bubblewrap jail verified (uid 10001", timeout_s=900)
        assert problem == "", f"{deployment}: {problem}\n" + log.read_text(errors="replace")[-3000:]
        if deployment == "mcp":  # serve listens once the tools are built: the pod's TCP probes
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                except OSError:
                    time.sleep(1.0)
            else:
                raise AssertionError(f"serve: port {port} not open\n" + log.read_text(errors="replace")[-3000:])
        else:  # the main loop runs with the tools built: the pod's exec probes, in the container
            time.sleep(5)
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            for probe in (c["readinessProbe"]["exec"]["command"], c["livenessProbe"]["exec"]["command"]):
                ok = subprocess.run(["podman", "exec", name, *probe], capture_output=True, text=True, timeout=60)
                assert ok.returncode == 0, f"{deployment}: {probe}: {ok.stdout}{ok.stderr}"
    finally:
        subprocess.run(["podman", *RUNTIME, "rm", "-f", "-t", "5", name], capture_output=True, timeout=120)
        proc.wait(timeout=120)
