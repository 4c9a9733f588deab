"""streamgrpo's planner task, expressed for TRL's GRPOTrainer (shared by the TRL benchmarks).

What TRL 1.16 can express of the agent, and how (``GRPOTrainer(tools=[...])``):
- the tools: each of streamgrpo's planner tools (calculator, python, knowledge_search by default)
  becomes a Python function ``name(input: str) -> str`` that runs the REAL tool through
  streamgrpo's executor and returns what the planner would see (``Observation.summary``);
- the prompt: the first planner turn is streamgrpo's own prompt (system: format, tool list,
  example; user: question + query analysis), and every reply starts with the same forced ``{"``;
- the multi-turn loop: TRL parses each reply with a response template, runs the tool it names,
  appends the result and generates again (``max_tool_calling_iterations``); tool-result tokens
  are masked out of the loss and the whole trajectory shares one group-relative advantage;
- the reward: streamgrpo's judge for source ``builtin`` (the default ``correct`` judge) on the final answer.

SmolLM2's chat template renders no tool calls and TRL knows no response parser for it (its
``add_response_schema`` raises "Unrecognized chat template"), so this module supplies both:
:data:`CHAT_TEMPLATE` (streamgrpo's planner JSON: ``{"tool": ..., "input": ...}`` /
``{"answer": ...}``; a tool result is a user turn ``Result: ...``) and :data:`RESPONSE_TEMPLATE`.

What TRL cannot express (the run differs there, by construction):
- the state prompt: streamgrpo re-renders each turn's prompt (question, analysis, the last 3
  steps with clipped observations); TRL appends turns to one growing conversation;
- a reply that does not parse ends a TRL trajectory (streamgrpo shows the planner its error and
  goes on); the last allowed turn is not constrained to an answer (streamgrpo's grammar forces one; TRL
  1.16 has no per-turn logits processor for tool loops) -- a planner that never answers scores 0 on both;
- per-turn budgets: TRL has one completion budget for all turns AND tool results
  (``max_completion_length``); the per-call cap is set through ``generation_kwargs``;
- stopping at the end of the JSON object (streamgrpo's ``stop_at_json_end``): TRL generates to
  EOS or the cap;
- the verifier and synthesiser roles (here: answer = the planner's answer, else empty, as streamgrpo's
  passthrough synthesiser does).

Not covered: other base models (the template is SmolLM2's ChatML).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: ChatML as SmolLM2 renders it, plus tool calls in streamgrpo's planner JSON and tool results as the
#: user turn streamgrpo's prompt would show ("Result: ..."). Generation starts with the forced '{"'.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if message.tool_calls %}{%- for tc in message.tool_calls %}"
    "{{ '{\"tool\": ' ~ (tc.function.name | tojson) }}"
    "{%- for k, v in tc.function.arguments.items() %}{{ ', ' ~ (k | tojson) ~ ': ' ~ (v | tojson) }}{%- endfor %}"
    "{{ '}' }}"
    "{%- endfor %}{%- else %}{{ message.content }}{%- endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{ '<|im_start|>user\\nResult: ' ~ message.content ~ '\\nReply with the next JSON object.<|im_end|>\\n' }}"
    "{%- else %}"
    "{{ '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' ~ prefix }}{%- endif %}"
)

#: transformers >= 5.13 response template: '{"tool": NAME, "input": VALUE}' is a tool call, anything else content.
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r'\{\s*"tool"\s*:\s*"(?P<name>[^"]*)"\s*,\s*"input"\s*:\s*',
            "close_pattern": r'(?<=")\s*\}',
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": {"input": "{content}"}}},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


@dataclass(frozen=True)
class Defaults:
    """streamgrpo's default training settings (read from its config classes, so they track the product)."""

    group_size: int
    samples_per_step: int
    max_turns: int
    max_new_tokens: int
    temperature: float
    top_p: float
    lr: float
    eps_low: float
    eps_high: float
    kl_coef: float
    max_grad_norm: float
    weight_decay: float
    lora: dict[str, Any]
    response_prefix: str

    @property
    def prompts_per_step(self) -> int:
        return max(1, self.samples_per_step // self.group_size)


def streamgrpo_defaults() -> Defaults:
    """The settings `streamgrpo run` trains with when nothing is configured."""
    from streamgrpo import config
    from streamgrpo.cli.run import run
    from streamgrpo.config import LoopSettings
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.streams.config import StreamsSettings
    from streamgrpo.trainer.config import TrainerConfig

    loop = config.load(LoopSettings, "loop")
    streams = config.load(StreamsSettings, "streams")
    trainer = config.load(TrainerConfig, "trainer")
    rollout = config.load(RolloutConfig, "rollout")
    group = next(int(p.default) for p in run.params if p.name == "group_size")  # type: ignore[arg-type]
    lora = {"r": trainer.lora_rank, "lora_alpha": trainer.lora_alpha, "lora_dropout": trainer.lora_dropout,
            "target_modules": list(trainer.lora_target_modules)}
    return Defaults(group, loop.samples_per_step, loop.max_turns, streams.max_new_tokens, streams.temperature,
                    streams.top_p, trainer.lr, trainer.eps_low, trainer.eps_high, trainer.kl_coef,
                    trainer.max_grad_norm, trainer.weight_decay, lora, rollout.response_prefix)


def agent_context() -> Any:
    """streamgrpo's loop context without a policy: the default tools and roles (no model is loaded)."""
    from streamgrpo import config
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context

    cfg = config.load(RolloutConfig, "rollout").model_copy(update={"constrain": "off"})  # TRL samples freely
    return build_context(cfg, policy=None)  # type: ignore[arg-type]


def planner_messages(question: str, ctx: Any) -> list[dict[str, str]]:
    """streamgrpo's first-turn planner prompt for ``question`` (system + user)."""
    from streamgrpo.rollout.roles import planner
    from streamgrpo.rollout.roles.executor import tool_example

    lines = [planner.tool_line(n, t.spec.description, tool_example(t)) for n, t in ctx.tools.items()]
    analysis = ctx.analyser.analyse(question, list(ctx.tools))
    return planner.build_messages(question, lines, analysis, [], max_steps=ctx.history_steps,
                                  clip=ctx.observation_clip)


def tool_functions(ctx: Any) -> list[Callable[[str], str]]:
    """One TRL tool per streamgrpo tool: runs it through the executor, returns what the planner sees."""
    from streamgrpo.rollout.roles.types import NextStep

    def make(name: str, tool: Any) -> Callable[[str], str]:
        def run(input: str) -> str:  # noqa: A002 (the planner's argument name)
            obs = ctx.executor.execute("", NextStep(tool=name, input=str(input)), tool)
            return str(obs.summary(ctx.observation_clip))

        run.__name__ = run.__qualname__ = name
        run.__doc__ = f"{tool.spec.description.split('. ')[0].rstrip('.')}.\n\nArgs:\n    input: the tool input\n"
        return run

    return [make(n, t) for n, t in ctx.tools.items()]


def prepare_tokenizer(model_path: str, prefix: str) -> Any:
    """SmolLM2's tokenizer with EOS = <|im_end|> (the converted GGUF labels <|im_start|> as EOS; the
    generation config and streamgrpo's policy stop on <|im_end|>), the planner chat template (forced
    ``prefix`` after the assistant header) and the response template."""
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(model_path)
    eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    tok.eos_token = tok.pad_token = tok.convert_ids_to_tokens(eos[0] if isinstance(eos, list) else eos)
    tok.chat_template = CHAT_TEMPLATE.replace("~ prefix", "~ " + _jinja_str(prefix))
    tok.response_template = RESPONSE_TEMPLATE
    return tok


def _jinja_str(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class Outcome:
    """What the judge sees of one TRL trajectory (streamgrpo's RolloutCompleted fields)."""

    answer: str
    status: str
    turns: int
    tool_calls: dict[str, int]


def outcome_of(completion: Any, prefix: str) -> Outcome:
    """The final answer of a TRL completion (a list of messages, or text for single-turn runs):
    the planner's answer if its last reply parses as one, else empty (streamgrpo's passthrough
    synthesiser); ANSWERED when the planner answered, else MAX_TURNS."""
    from streamgrpo.rollout.roles import planner

    messages = completion if isinstance(completion, list) else [{"role": "assistant", "content": str(completion)}]
    calls: Counter[str] = Counter()
    answer, turns = None, 0
    for m in messages:
        if m.get("role") == "tool":
            continue
        turns += 1
        for tc in m.get("tool_calls") or []:
            calls[str(tc.get("function", {}).get("name", "?"))] += 1
        if not m.get("tool_calls"):
            content = str(m.get("content", ""))
            step = planner.parse(content if content.lstrip().startswith("{") else prefix + content).value
            if step is not None and step.is_final:
                answer = step.answer
    if answer is not None:
        return Outcome(str(answer), "ANSWERED", turns, dict(calls))
    return Outcome("", "MAX_TURNS", turns, dict(calls))


@dataclass
class JudgeReward:
    """TRL reward function: streamgrpo's judge for the task's source on each completion's outcome."""

    prefix: str
    history: list[dict[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        from streamgrpo.judge.config import JudgeSettings
        from streamgrpo.judge.service import Router

        self.router = Router(JudgeSettings())
        self.__name__ = "streamgrpo_judge"

    def score(self, question: str, truths: Sequence[str], source: str, completion: Any) -> tuple[float, Outcome]:
        from streamgrpo.judge.scorers.base import Candidate

        out = outcome_of(completion, self.prefix)
        cand = Candidate(question=question, answer=out.answer, ground_truths=tuple(truths), status=out.status,
                         turns=out.turns, tool_calls=out.tool_calls)
        return float(self.router.scorer_for(source).score(cand).score), out

    def __call__(self, completions: list[Any], question: list[str], truths: list[list[str]], source: list[str],
                 **_: Any) -> list[float]:
        scored = [self.score(q, t, s, c) for q, t, s, c in zip(question, truths, source, completions, strict=True)]
        self.history.append({
            "reward": sum(r for r, _ in scored) / len(scored),
            "answered": sum(o.status == "ANSWERED" for _, o in scored) / len(scored),
            "tool_calls": sum(sum(o.tool_calls.values()) for _, o in scored) / len(scored),
        })
        return [r for r, _ in scored]
