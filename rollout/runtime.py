"""Build the run-time pieces of a worker or an ``ask`` run from :class:`RolloutConfig`.

Registries (no if/elif chains): :data:`POLICIES` (``local`` | ``vllm``) builds the planner policy;
:data:`ROLE_BACKENDS` (``local`` | ``openai``) builds the fixed text model of the executor,
verifier, synthesiser and analysis (only when one of them runs in ``model`` mode, or the
``generalist`` tool is enabled); :func:`build_context` assembles the :class:`LoopContext`.

Heavy imports (torch, transformers, openai) happen inside the factories, so importing this module
is cheap. What is not covered: starting a vLLM server (:mod:`.vllm_serve` does, for `run --policy vllm`;
k8s/ deploys one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamgrpo.inference.base import PlannerPolicy, TextModel
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import LoopContext, effective_prefix
from streamgrpo.rollout.roles.analyser import build_analyser
from streamgrpo.rollout.roles.executor import build_executor
from streamgrpo.rollout.roles.synthesiser import build_synthesiser
from streamgrpo.rollout.roles.verifier import build_verifier

if TYPE_CHECKING:
    from streamgrpo.models.grammar import TokenGrammar

log = logging.getLogger(__name__)


def _local_policy(cfg: RolloutConfig) -> PlannerPolicy:
    from streamgrpo.inference.local import LocalPolicy

    return LocalPolicy(cfg.model, device=cfg.device, cache_dir=cfg.model_cache, dtype=cfg.dtype,
                       keep_last=cfg.keep_resident, engine=cfg.engine, prefix_cache_tokens=cfg.prefix_cache_tokens)


def _vllm_policy(cfg: RolloutConfig) -> PlannerPolicy:
    from streamgrpo.inference.vllm import VLLMPolicy
    from streamgrpo.models.base import resolve_base_model

    tokenizer = str(resolve_base_model(cfg.model, cfg.model_cache))  # local: cuts replies from token ids
    policy = VLLMPolicy(base_url=cfg.vllm_url, model=cfg.vllm_model or cfg.model, api_key=cfg.vllm_api_key,
                        tokenizer=tokenizer, keep_last=cfg.keep_resident, dtype=cfg.vllm_dtype)
    policy.wait_ready(cfg.vllm_wait_s)  # a worker may start before its server has loaded the model
    return policy


#: policy backend name -> factory(config)
POLICIES: dict[str, Callable[[RolloutConfig], PlannerPolicy]] = {"local": _local_policy, "vllm": _vllm_policy}


def _local_text(cfg: RolloutConfig, policy: PlannerPolicy) -> TextModel:
    from streamgrpo.inference.local import LocalPolicy, LocalTextModel

    # the same weights with the adapter disabled; a non-local planner gets its own local copy
    base = policy if isinstance(policy, LocalPolicy) else _local_policy(cfg)
    return LocalTextModel(base)  # type: ignore[arg-type]


def _openai_text(cfg: RolloutConfig, policy: PlannerPolicy) -> TextModel:
    from streamgrpo.inference.openai_text import OpenAITextModel

    if not cfg.role_base_url or not cfg.role_model:
        raise ValueError("role_backend 'openai' needs role_base_url and role_model in the [rollout] settings")
    return OpenAITextModel(base_url=cfg.role_base_url, model=cfg.role_model, api_key=cfg.role_api_key)


#: role backend name -> factory(config, planner policy)
ROLE_BACKENDS: dict[str, Callable[[RolloutConfig, PlannerPolicy], TextModel]] = {
    "local": _local_text, "openai": _openai_text,
}


def needs_text_model(cfg: RolloutConfig) -> bool:
    """True when some role runs in 'model' mode or the generalist tool is enabled."""
    modes = (cfg.analysis_mode, cfg.executor_mode, cfg.verifier_mode, cfg.synthesiser_mode)
    return "model" in modes or "generalist" in cfg.tools.enabled


def build_policy(cfg: RolloutConfig) -> PlannerPolicy:
    return POLICIES[cfg.policy](cfg)


#: How to run without the python tool, appended to every "the sandbox cannot start" error.
PYTHON_TOOL_OFF = ('To run without the python tool, leave "python" out of [rollout.tools] enabled '
                   '(e.g. enabled = ["calculator", "knowledge_search"]).')


def with_off_switch(build: Callable[[], Any]) -> Any:
    """``build()``; a SandboxUnavailableError gets :data:`PYTHON_TOOL_OFF` added to its message."""
    from streamgrpo.sandbox.errors import SandboxUnavailableError

    try:
        return build()
    except SandboxUnavailableError as exc:
        raise SandboxUnavailableError(f"{exc} {PYTHON_TOOL_OFF}") from exc


def preflight_tools(cfg: RolloutConfig) -> None:
    """Fail closed before the model loads: when the python tool is enabled, plan its jail (bubblewrap present
    and new enough, an unprivileged uid, a readable interpreter, the seccomp filter). The probe through the
    real jail runs when the tool is built (:func:`build_context`)."""
    if "python" not in cfg.tools.enabled:
        return
    from streamgrpo.sandbox.jail import plan_jail

    with_off_switch(lambda: plan_jail(cfg.tools.sandbox))


def build_context(cfg: RolloutConfig, policy: PlannerPolicy, text_model: TextModel | None = None) -> LoopContext:
    """Tools + roles around ``policy``; builds the role text model when a mode needs one."""
    from streamgrpo.rollout.tools import ToolContext, build_tools

    if text_model is None and needs_text_model(cfg):
        text_model = ROLE_BACKENDS[cfg.role_backend](cfg, policy)
    generate = None
    if text_model is not None:
        model = text_model

        def generate(question: str) -> str:
            return model.complete([{"role": "user", "content": question}], max_tokens=cfg.role_max_tokens,
                                  temperature=0.0)

    tools = with_off_switch(lambda: build_tools(settings=cfg.tools, context=ToolContext(generate=generate)))
    kw = {"max_tokens": cfg.role_max_tokens}
    ctx = LoopContext(
        policy=policy, tools=tools,
        analyser=build_analyser(cfg.analysis_mode, text_model, **kw),
        executor=build_executor(cfg.executor_mode, text_model, **kw),
        verifier=build_verifier(cfg.verifier_mode, text_model, **kw),
        synthesiser=build_synthesiser(cfg.synthesiser_mode, text_model, **kw),
        service=cfg.service, max_prompt_tokens=cfg.max_prompt_tokens, history_steps=cfg.history_steps,
        observation_clip=cfg.observation_clip, response_prefix=cfg.response_prefix,
        stop_at_json_end=cfg.stop_at_json_end, answer_in_call=cfg.answer_in_call,
        planner_examples=cfg.planner_examples,
        answer_at_last_turn=cfg.answer_at_last_turn, sampling_seed=cfg.sampling_seed,
    )
    ctx.constraint = build_constraint(cfg.constrain, ctx)
    return ctx


def build_constraint(mode: str, ctx: LoopContext) -> TokenGrammar | None:
    """The planner-reply grammar of ``ctx`` (its tools, forced prefix and policy vocabulary) for
    ``[rollout] constrain`` = ``mode``; None when off, or on 'auto' with a policy that cannot mask."""
    if mode == "off":
        return None
    policy = ctx.policy
    if not policy.applies_logits_mask:
        if mode == "on":
            raise ValueError(f"[rollout] constrain = 'on' needs a policy that masks logits (policy 'local'); "
                             f"{type(policy).__name__} cannot: set constrain to 'auto' or 'off'")
        log.info("planner replies sampled without a grammar: %s cannot mask logits", type(policy).__name__)
        return None
    from streamgrpo.models.grammar import ActionGrammar, TokenGrammar

    local: Any = policy  # a masking policy has a tokenizer, eos_ids and vocab_size (LocalPolicy)
    grammar = ActionGrammar(tuple(ctx.tools), effective_prefix(ctx), tuple(sorted(local.eos_ids)),
                            answer_in_call=ctx.answer_in_call != "forbid")
    try:
        compiled = TokenGrammar(grammar, local.tokenizer, int(local.vocab_size))
    except ValueError as exc:  # e.g. a response_prefix that cannot start a reply, a tokenizer llguidance cannot read
        if mode == "on":
            raise ValueError(f"[rollout] constrain = 'on': {exc}") from exc
        log.warning("planner replies sampled without a grammar (constrain = 'auto'): %s", exc)
        return None
    if ctx.answer_at_last_turn:
        try:
            compiled.with_answer_turn(1).matcher(turn=1)
        except ValueError as exc:
            raise ValueError(f"[rollout] answer_at_last_turn constrains the last reply to an answer, but "
                             f"response_prefix {ctx.response_prefix!r} cannot start one ({exc}); use a prefix "
                             f"such as '{{\"' or set answer_at_last_turn = false") from exc
    log.info("planner replies constrained to %s%s", grammar.descriptor,
             " (the last allowed turn answers: answer_turn = each request's max_turns)" if ctx.answer_at_last_turn else "")
    return compiled
