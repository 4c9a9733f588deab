"""The vLLM server's command line, environment and process handling (no vLLM needed: stand-in processes)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from fixtures.vllm.support import group_members
from pydantic import SecretStr

from streamgrpo.inference.errors import VLLMServerError
from streamgrpo.inference.vllm_server import (
    VLLMServerProcess,
    cpu_ranges,
    find_python,
    host_port,
    rollout_env,
    server_command,
    server_env,
    wait_ready,
)
from streamgrpo.rollout.config import RolloutConfig


def test_command_has_the_documented_flags_and_binds_the_url() -> None:
    cfg = RolloutConfig(vllm_url="http://127.0.0.1:8123/v1", vllm_extra_args=["--max-num-seqs", "16"])
    argv = server_command(cfg, "/venv/bin/python", "/models/smol")
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    pairs = {argv[i]: argv[i + 1] for i in range(3, len(argv) - 1) if argv[i].startswith("--")}
    assert pairs["--model"] == "/models/smol" and pairs["--served-model-name"] == "smollm2-135m-instruct"
    assert pairs["--dtype"] == "float32" and pairs["--logprobs-mode"] == "processed_logprobs"
    assert pairs["--generation-config"] == "vllm" and pairs["--max-lora-rank"] == "16"
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8123" and "--enable-lora" in argv
    i = argv.index("--lora-target-modules")
    assert argv[i + 1:i + 3] == ["qkv_proj", "o_proj"] and argv[-2:] == ["--max-num-seqs", "16"]
    assert "--gpu-memory-utilization" not in argv
    gpu = server_command(cfg.model_copy(update={"vllm_gpu_memory_utilization": 0.8, "vllm_lora_target_modules": [],
                                                "vllm_dtype": "bfloat16"}), "py", "m")
    assert "--lora-target-modules" not in gpu and gpu[gpu.index("--gpu-memory-utilization") + 1] == "0.8"
    assert gpu[gpu.index("--dtype") + 1] == "bfloat16"


def test_environment_enables_runtime_lora_and_keeps_the_key_off_the_command_line() -> None:
    cfg = RolloutConfig(vllm_api_key=SecretStr("sk-server"), vllm_kv_cache_gib=3)
    env = server_env(cfg, {"PATH": "/bin", "VLLM_API_KEY": "stale"}, cpus=[0, 1, 2, 5])
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-2,5" and env["PATH"] == "/bin"
    assert env["VLLM_API_KEY"] == "sk-server"
    assert "sk-server" not in " ".join(server_command(cfg, "py", "m"))
    assert "VLLM_API_KEY" not in server_env(RolloutConfig(), {"VLLM_API_KEY": "stale"}, cpus=[0])
    assert server_env(RolloutConfig(vllm_cpu_threads="nobind"), {}, cpus=[0])["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_small_pure_helpers() -> None:
    assert cpu_ranges([7]) == "7" and cpu_ranges(range(4)) == "0-3"
    with pytest.raises(ValueError):
        cpu_ranges([])
    assert host_port("http://localhost/v1") == ("localhost", 80) and host_port("https://h:9/v1") == ("h", 9)
    with pytest.raises(VLLMServerError, match="no host"):
        host_port("/v1")
    assert rollout_env("http://127.0.0.1:9/v1") == {"STREAMGRPO_ROLLOUT__POLICY": "vllm",
                                                    "STREAMGRPO_ROLLOUT__VLLM_URL": "http://127.0.0.1:9/v1"}


def test_a_missing_virtualenv_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(VLLMServerError, match="make setup-vllm"):
        find_python(RolloutConfig(vllm_python=tmp_path / "nope" / "python"))
    assert find_python(RolloutConfig(vllm_python=Path(sys.executable))) == Path(sys.executable)


def test_a_server_that_dies_during_startup_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    proc = VLLMServerProcess([sys.executable, "-c", "print('CUDA out of memory, for example'); raise SystemExit(3)"],
                             dict(os.environ), log)
    proc.start()
    with pytest.raises(VLLMServerError, match="exited before it was ready(?s:.*)CUDA out of memory"):
        wait_ready("http://127.0.0.1:9/v1", "m", timeout_s=60, alive=proc.alive, log_path=log, interval_s=0.05)
    proc.stop()


def test_waiting_gives_up_after_the_timeout_and_reports_progress(tmp_path: Path) -> None:
    ticks: list[float] = []
    with pytest.raises(VLLMServerError, match="not ready after"):
        # 2 s, not less: the first probe imports httpx, which alone took over 0.2 s on a loaded machine
        wait_ready("http://127.0.0.1:9/v1", "m", timeout_s=2.0, on_wait=lambda e, _r: ticks.append(e),
                   interval_s=0.05)
    assert ticks and ticks == sorted(ticks)


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    """The server forks an engine core; stopping by pid must end both (no leftovers holding 5 GB)."""
    child_pid = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; "
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
              f"open({str(child_pid)!r}, 'w').write(str(c.pid)); time.sleep(600)")
    proc = VLLMServerProcess([sys.executable, "-c", script], dict(os.environ), tmp_path / "log")
    proc.start()
    deadline = time.monotonic() + 30
    while not child_pid.exists() or not child_pid.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(child_pid.read_text())
    proc.stop(grace_s=10)
    assert not proc.alive() and proc.pid is not None
    deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously: give the kernel a moment
    while grandchild in group_members(proc.pid):
        assert time.monotonic() < deadline, "the server's forked child outlived stop()"
        time.sleep(0.05)



def test_the_launcher_started_by_run_accepts_the_supervisor_variable_and_does_not_pass_it_on(tmp_path: Path) -> None:
    """`run` starts `python -m streamgrpo.rollout.vllm_serve` with STREAMGRPO_SUPERVISOR_PID set, like every
    child; the launcher must arm die-with-supervisor and exec the server without it (it once refused the
    variable as a misspelt setting, and the vLLM server never started)."""
    import subprocess

    seen = tmp_path / "seen.txt"
    fake = tmp_path / "python"  # stands in for the vLLM virtualenv's python: records what it was given
    fake.write_text(f"#!/bin/sh\nenv > {seen}\necho \"$@\" >> {seen}\n")
    fake.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_")}
    env.update(STREAMGRPO_SUPERVISOR_PID=str(os.getpid()), STREAMGRPO_ROLLOUT__VLLM_PYTHON=str(fake),
               STREAMGRPO_ROLLOUT__MODEL=str(model))
    proc = subprocess.run([sys.executable, "-m", "streamgrpo.rollout.vllm_serve"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = seen.read_text()
    assert "vllm.entrypoints.openai.api_server" in text and str(model) in text
    assert "STREAMGRPO_SUPERVISOR_PID" not in text
