"""Settings of a rollout worker and of ``streamgrpo ask`` (section ``[rollout]``; tools in ``[rollout.tools]``).

Layering (see :mod:`streamgrpo.config`): defaults < TOML ``[rollout]`` < env
``STREAMGRPO_ROLLOUT__<FIELD>`` (flat fields) < command-line options.

Defaults are the model-free training setup for a small CPU machine: the planner is the local
SmolLM2-135M (the only model call per turn), executor ``passthrough``, verifier ``rule``,
synthesiser ``passthrough``, analysis ``rule``. ``streamgrpo ask`` switches the roles to ``model``
(the same local weights with the adapter disabled) unless told otherwise.

What is covered: validation of every setting. What is not: whether a URL answers (checked at start).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, SecretStr

from streamgrpo.config import StrictModel, shared
from streamgrpo.metrics import DEFAULT_PORTS
from streamgrpo.rollout.tools.config import ToolsSettings
from streamgrpo.topics import catalog


class RolloutConfig(StrictModel):
    """One rollout worker (or one ``ask`` run)."""

    SHARED_FIELDS: ClassVar[tuple[str, ...]] = ("adapter_name", "max_turns", "canary_share", "adapter_store",
                                                "model_cache")

    # -- planner policy ------------------------------------------------------------------------
    policy: Literal["local", "vllm"] = Field(
        "local", description="Planner backend: 'local' (transformers + peft in this process) or 'vllm' (HTTP).")
    model: str = Field("smollm2-135m-instruct", description="Base model: the bundled alias, a local directory "
                       "or a hub id already in the local cache (never downloaded here).")
    model_cache: Path = shared("model_cache")
    device: str = Field("cpu", description="Torch device of the local policy ('cpu', 'cuda', 'cuda:1').")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights/compute dtype of the local policy. 'auto': bfloat16 where bf16 matmuls are "
        "fast (CPUs with AMX, GPUs with bf16), else float32. Recorded per action (PlannerAction.engine); "
        "bf16 logprobs differ from an fp32 recomputation (~0.03 mean), which the trainer corrects for.")
    engine: Literal["fast", "eager"] = Field(
        "fast", description="Local sampling engine: 'fast' (lean forward, static KV cache, one decode loop "
        "batching concurrent groups, prompt-prefix reuse; Llama-architecture models) or 'eager' (the "
        "transformers-forward loop, one call at a time; any model). 'fast' falls back to 'eager' by itself "
        "where it cannot run a model or adapter.")
    prefix_cache_tokens: int = Field(
        4096, ge=0, le=1_000_000, description="Prompt-prefix keys/values the fast engine keeps across calls "
        "(tokens; ~46 KB each for SmolLM2 in float32). 0 disables reuse across calls.")
    vllm_url: str = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible base URL of the vLLM server.")
    vllm_model: str | None = Field(None, description="Base model name served by vLLM (default: `model`).")
    vllm_api_key: SecretStr | None = Field(None, description="API key of the vLLM server (never logged).")
    vllm_wait_s: float = Field(600.0, ge=0, le=7200, description="How long a worker waits at start for the vLLM "
                               "server to serve the base model (a server loads in 1-3 min on a CPU).")
    # -- the vLLM server `streamgrpo run --policy vllm` starts (rollout/vllm_serve.py, inference/vllm_server.py) --
    vllm_dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "float32", description="dtype of the vLLM server, recorded in every PlannerAction.engine ('vllm/<dtype>'). "
        "float32: behaviour logprobs match the trainer's fp32 recomputation (measured max 4e-5); bfloat16: a "
        "0.13-0.16 max / 0.03 mean mismatch that the trainer's importance ratio must correct. Describes an "
        "external server too: set it to what that server runs.")
    vllm_python: Path | None = Field(None, description="Python of the vLLM virtualenv (default: .venv-vllm/bin/python "
                                     "in the working directory or the source checkout; `make setup-vllm` makes it).")
    vllm_kv_cache_gib: int = Field(2, ge=1, le=1024, description="KV cache of a CPU server in GiB "
                                   "(VLLM_CPU_KVCACHE_SPACE); the server takes about this plus 2.5 GiB (4.6 GiB RSS measured at 2).")
    vllm_cpu_threads: str = Field("all", description="Cores of a CPU server's compute threads "
                                  "(VLLM_CPU_OMP_THREADS_BIND): 'all' = every core this process may use, or vLLM's "
                                  "own syntax ('auto', 'nobind', '0-3').")
    vllm_gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="GPU server: share of GPU "
                                                      "memory vLLM may take (unset: vLLM's default, 0.9). When "
                                                      "`run` puts the trainer on the same GPU, set e.g. 0.4.")
    vllm_max_model_len: int = Field(2048, ge=256, le=1_048_576, description="Context length of the vLLM server "
                                    "(prompt + reply); must exceed max_prompt_tokens + max_new_tokens.")
    vllm_max_lora_rank: Literal[8, 16, 32, 64, 128, 256, 512] = Field(
        16, description="Largest LoRA rank the server accepts (>= the trainer's lora_rank). On a CPU keep it small: "
        "rank 64 on every layer stalled ~22 s per uncached prefill.")
    vllm_max_loras: int = Field(4, ge=1, le=64, description="Adapter versions the server can batch at once.")
    vllm_lora_target_modules: list[str] = Field(
        default_factory=lambda: ["qkv_proj", "o_proj"], description="Modules the server applies LoRA to (vLLM packs "
        "q/k/v into qkv_proj); must cover the trainer's lora_target_modules. Empty: every supported module.")
    vllm_extra_args: list[str] = Field(default_factory=list, description="More `vllm serve` arguments, appended "
                                       "as given (e.g. ['--max-num-seqs', '16']).")
    vllm_start_timeout_s: float = Field(900.0, gt=0, le=7200, description="How long `run` waits for its vLLM "
                                        "server to become ready before giving up.")
    # -- fixed (untrained) role model ------------------------------------------------------------
    role_backend: Literal["local", "openai"] = Field(
        "local", description="Model of the executor/verifier/synthesiser/analysis in 'model' mode: 'local' = the "
        "planner's base weights with the adapter disabled; 'openai' = an OpenAI-compatible endpoint.")
    role_base_url: str | None = Field(None, description="Base URL of the OpenAI-compatible role model endpoint.")
    role_api_key: SecretStr | None = Field(None, description="API key of the role model endpoint (never logged).")
    role_model: str | None = Field(None, description="Model name at the role endpoint.")
    role_max_tokens: int = Field(64, ge=8, le=2048, description="Token budget of one role-model reply.")
    # -- role modes (recorded in the events) ------------------------------------------------------
    analysis_mode: Literal["rule", "model"] = Field("rule", description="Query analysis: keyword 'rule' or 'model'.")
    executor_mode: Literal["passthrough", "model"] = Field(
        "passthrough", description="'passthrough': the planner's input goes to the tool; 'model': the role model "
        "writes the tool input.")
    verifier_mode: Literal["rule", "model"] = Field(
        "rule", description="'rule': stop when the planner answers; 'model': the role model judges after tool calls.")
    synthesiser_mode: Literal["passthrough", "model"] = Field(
        "passthrough", description="'passthrough': the planner's answer (empty when it never answered); 'model': "
        "the role model writes it from the observations.")
    # -- the answer path (what the trained planner decides; docs/learning.md measures each choice) --------------
    answer_in_call: Literal["forbid", "ignore", "accept"] = Field(
        "forbid", description="An answer written in the same object as a tool call (before the tool's result is "
        "seen): 'forbid' = the planner grammar admits a call XOR an answer (next-step/v2); 'ignore' = admitted, "
        "but the tool runs and the answer is dropped; 'accept' = it is the final answer (next-step/v1, the "
        "earlier behaviour).")
    answer_at_last_turn: bool = Field(
        True, description="The reply of the last allowed turn (max_turns) is constrained to {\"answer\": ...} "
        "(recorded in the grammar descriptor so the trainer replays the same masks): the planner always answers "
        "from what it has seen, and running out of turns never hands a tool output in as its answer.")
    planner_examples: Literal["fixed", "analysis"] = Field(
        "fixed", description="The worked example in the planner's prompt: 'fixed' = one calculator call; "
        "'analysis' = the example follows the query analysis's useful tools (an archive call for a question the "
        "analysis sends to knowledge_search, both tools when it names both). docs/learning.md measures both.")
    # -- trajectory -------------------------------------------------------------------------------
    tools: ToolsSettings = Field(default_factory=ToolsSettings, description="Tools given to the planner "
                                 "(TOML [rollout.tools]: enabled, corpus path, sandbox limits...).")
    max_turns: int = shared("max_turns")
    max_prompt_tokens: int = Field(900, ge=128, le=32768, description="Planner prompt budget: older steps are "
                                   "dropped from the state until it fits.")
    history_steps: int = Field(3, ge=0, le=32, description="Most recent steps shown to the planner.")
    observation_clip: int = Field(160, ge=16, le=4000, description="Characters of each tool output shown to the "
                                  "planner.")
    response_prefix: str = Field('{"', max_length=32, description="Text forced at the start of every planner "
                                 "reply (part of the state prompt; '' = none). '{\"' makes a small model emit JSON.")
    stop_at_json_end: bool = Field(True, description="End a planner reply with the token that closes its JSON "
                                   "object instead of running to EOS / max_new_tokens (the rest is never parsed).")
    constrain: Literal["auto", "on", "off"] = Field(
        "auto", description="Grammar-constrained planner replies (models/grammar.py): every sampled reply is "
        "one JSON object calling a registered tool with a non-empty input, or answering. The behaviour logprobs "
        "are those of the masked, renormalised distribution, SamplingParams.constraint records the grammar and "
        "the trainer replays it. The local policy masks the logits itself; vLLM gets the same grammar as "
        "structured_outputs (inference/constraint.py) and every reply is checked against it. 'auto': where the "
        "policy can apply it and the grammar builds (a warning otherwise), free sampling elsewhere (a vLLM policy "
        "without a local tokenizer); 'on': refuse to start without it; 'off': free sampling, then repair.")
    temperature: float = Field(0.7, gt=0, le=5, description="Planner temperature of `ask` (requests carry their own).")
    top_p: float = Field(1.0, gt=0, le=1, description="Planner nucleus mass of `ask`.")
    max_new_tokens: int = Field(64, ge=8, le=4096, description="Planner tokens per action in `ask`.")
    seed: int | None = Field(None, description="Sampling seed of `ask` (unset: random).")
    sampling_seed: int | None = Field(
        None, ge=0, lt=1 << 63, description="Seed of the worker's planner sampling. Set: every planner reply "
        "draws from its own seed, a blake2b hash of (this seed, the task's source, question and attempt, the "
        "sample's index in the group, the turn, the role), recorded as PlannerAction.sampling.seed -- the same "
        "task gives the same trajectories under the same adapter, and two runs that differ in one setting draw "
        "the same numbers (paired arms; bench/bench_learning.py sets it to run i's seed). Unset (default): "
        "unseeded, so independent runs are independent replications. vLLM honours it per HTTP request only "
        "(inference/vllm.py).")
    # -- worker -----------------------------------------------------------------------------------
    concurrency: int = Field(4, ge=1, le=256, description="Groups run at once by one worker (each in a thread; with "
                             "the fast local engine their planner calls share one decode batch). More groups keep the "
                             "worker busy while finished groups travel through judge, window and admission: "
                             "`python bench/bench_run.py` (10-minute `streamgrpo run`s on 2 CPU cores) measured 12.8 "
                             "rollouts/min at 2 and 19.6 at 4. `streamgrpo run` sizes admission to it.")
    consumer_group: str = Field("rollout", description="Kafka consumer group of the workers (more workers in the "
                                "same group = more throughput).")
    batch_max_records: int = Field(64, ge=1, le=10000, description="Most requests taken from Kafka per poll.")
    linger_ms: int = Field(300, ge=0, le=60000, description="How long to keep polling for the rest of a group "
                           "whose requests arrived split across polls.")
    service: str = Field("rollout", description="Producer service name written into every event envelope.")
    metrics_port: int = Field(DEFAULT_PORTS["rollout"], ge=0, le=65535, description="Port of the Prometheus /metrics and /status endpoint (0 = off; a port in use is logged and skipped).")
    # -- adapters ---------------------------------------------------------------------------------
    adapter_name: str = shared("adapter_name")
    adapter_store: Path = shared("adapter_store")
    canary_share: float = shared("canary_share")
    keep_resident: int = Field(4, ge=1, le=64, description="Adapter versions kept loaded at once (K).")
    follow_adapters: bool = Field(True, description=f"Follow `{catalog.ADAPTER_EVENTS}` and hot-swap published adapters.")
    adapter_wait_s: float = Field(60.0, ge=0, le=3600, description="How long a group waits for its adapter version "
                                  "to become resident before its rollouts end as ERROR.")
    serve_resident_fallback: bool = Field(
        False, description="When the requested version never becomes resident, serve the newest resident one "
        "instead (the events then record the version that actually served). Off: no silent fallback.")


#: Role modes used by `streamgrpo ask` (the whole multi-agent system with model roles).
ASK_MODEL_MODES = {"analysis_mode": "model", "executor_mode": "model", "verifier_mode": "model",
                   "synthesiser_mode": "model"}
