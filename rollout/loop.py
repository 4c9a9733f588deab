"""The agent loop: the N trajectories of one group, run in LOCKSTEP, emitting events.

Per group: (0) the question is analysed ONCE (skills, useful tools; not trained, see
:mod:`~streamgrpo.rollout.roles.analyser`); then per turn, for every still-active trajectory:
(1) the planner picks one tool + input, or answers (a demonstration's request GIVES the planner's replies:
:mod:`.demonstration`; tools, verifier and events are as for any rollout) -- all active trajectories' planner prompts go
into ONE ``policy.generate`` call (per adapter version and sampling setting; a group has one); under
``[rollout] sampling_seed`` each row of it draws from its trajectory's own seed (:mod:`.seeding`), recorded
as ``PlannerAction.sampling.seed``;
(2) the executor turns the step into a tool command, (3) the tool runs, (4) the verifier decides
stop/continue; on stop or at ``max_turns`` (5) the synthesiser writes the final answer.

The answer path (``answer_in_call``, ``answer_at_last_turn``; docs/learning.md measures them): by
default a reply is a tool call XOR an answer, so an answer is written after the observation it
depends on; and the reply of the last allowed turn is an answer (grammar-constrained, recorded in the
grammar descriptor), so a planner that keeps calling tools cannot have a tool output handed in as its
answer. An answer that comes with a tool call in a free (unconstrained) reply is dropped unless
``answer_in_call == "accept"``: the tool runs.

Events (through ``sink``), all with envelope ids task/group/rollout(/turn) and DETERMINISTIC ids
(:func:`streamgrpo.avro.ids.rollout_event_id`) so a redelivered request yields recognisable
duplicates: one ``PlannerAction`` per planner turn (prompt token ids, action token ids, behaviour
logprobs, the adapter version that ACTUALLY served it), one ``ToolObservation`` per tool call,
one ``Verdict`` per completed turn and exactly one ``RolloutCompleted`` per rollout (ANSWERED,
MAX_TURNS, or ERROR with the reason).

Failure policy: an exception from a model call (:data:`MODEL_ERRORS`) or a tool ends the affected
rollouts as ERROR with the reason; a structured output that does not parse is not an error (it is
a recorded ``ParseStatus.FAILED`` and the planner sees it next turn).

What is covered: trajectory logic and event emission. What is not covered: Kafka (the worker
wires ``sink`` to a producer), adapter residency (the worker checks it before calling), and
sandboxing (tools own it; model-written code never runs in this process).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamgrpo import metrics
from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.errors import StreamGRPOError
from streamgrpo.inference.base import Generation, PlannerPolicy
from streamgrpo.inference.constraint import GrammarMask
from streamgrpo.inference.stopping import JsonObjectEnd
from streamgrpo.rollout import demonstration, seeding
from streamgrpo.rollout.roles import planner
from streamgrpo.rollout.roles.analyser import Analyser, RuleAnalyser
from streamgrpo.rollout.roles.executor import Executor, PassthroughExecutor, tool_example, unknown_tool
from streamgrpo.rollout.roles.synthesiser import PassthroughSynthesiser, Synthesiser
from streamgrpo.rollout.roles.types import Observation, QueryAnalysis, TurnRecord
from streamgrpo.rollout.roles.verifier import RuleVerifier, VerdictDecision, Verifier
from streamgrpo.rollout.tools.base import Tool

if TYPE_CHECKING:
    from streamgrpo.models.grammar import TokenGrammar

#: Exceptions of model backends and tools that end a rollout as ERROR (anything else is a bug and propagates).
MODEL_ERRORS: tuple[type[BaseException], ...] = (StreamGRPOError, RuntimeError, ValueError, OSError, TimeoutError)

EventSink = Callable[[R.Event], None]


@dataclass
class LoopContext:
    """Everything one group run needs; built once per worker (see :func:`streamgrpo.rollout.worker.build_context`)."""

    policy: PlannerPolicy
    tools: Mapping[str, Tool]
    analyser: Analyser = field(default_factory=RuleAnalyser)
    executor: Executor = field(default_factory=PassthroughExecutor)
    verifier: Verifier = field(default_factory=RuleVerifier)
    synthesiser: Synthesiser = field(default_factory=PassthroughSynthesiser)
    service: str = "rollout"
    max_prompt_tokens: int = 900
    history_steps: int = 3
    observation_clip: int = 160
    #: Text forced at the start of every planner reply (``'{"'`` makes a small model emit JSON). It is part
    #: of the STATE: its token ids end ``prompt_token_ids``; ``action_text``/``action_token_ids`` are the
    #: sampled continuation only, and parsing reads prefix + continuation. Needs a policy with a
    #: ``tokenizer`` (local backends); ignored otherwise.
    response_prefix: str = ""
    #: End each planner reply with the token that closes its JSON object (:mod:`.policy.stopping`);
    #: the recorded action is then exactly the object (plus that token's trailing characters, if any).
    stop_at_json_end: bool = True
    #: Grammar every planner reply is sampled under (:mod:`streamgrpo.models.grammar`; built by
    #: :func:`streamgrpo.rollout.runtime.build_constraint`), or None: free sampling. Its descriptor is
    #: recorded as ``PlannerAction.sampling.constraint`` so the trainer replays the same masks.
    constraint: TokenGrammar | None = None
    #: An answer in the same object as a tool call: 'forbid' (grammar v2), 'ignore' (the tool runs), 'accept'.
    answer_in_call: str = "forbid"
    planner_examples: str = "fixed"  # [rollout] planner_examples: which worked example the planner's prompt shows
    #: The reply of turn ``max_turns`` must be an answer (constrained where a grammar applies; asked for always).
    answer_at_last_turn: bool = True
    #: ``[rollout] sampling_seed``: each planner draw is seeded per trajectory and turn (:mod:`.seeding`); None: unseeded.
    sampling_seed: int | None = None

    def example_key(self, analysis: QueryAnalysis | None) -> str:
        """The key of :data:`planner.EXAMPLES` a planner prompt shows for ``analysis`` (the one place both the prompt
        and its recorded ``prompt_hash`` read it from)."""
        return planner.example_for(analysis, self.planner_examples)

    def grammar_for(self, request: R.RolloutRequest) -> TokenGrammar | None:
        """The grammar of ``request``'s replies (its answer turn is its ``max_turns``), or None: free sampling."""
        if self.constraint is None:
            return None
        return self.constraint.with_answer_turn(request.max_turns if self.answer_at_last_turn else 0)

    def seed_for(self, request: R.RolloutRequest, turn: int) -> int | None:
        """The seed of ``request``'s planner reply at ``turn``, or None: unseeded (the request's own ``sampling.seed``)."""
        if self.sampling_seed is None:
            return None
        return seeding.draw_seed(self.sampling_seed, request, turn, planner.ROLE)

    def final_turn(self, request: R.RolloutRequest, turn: int) -> bool:
        """Whether the reply of ``turn`` must answer."""
        return self.answer_at_last_turn and turn >= request.max_turns


@dataclass(frozen=True)
class RolloutResult:
    """Summary of one finished trajectory (the RolloutCompleted event carries the same)."""

    rollout_id: str
    status: R.RolloutStatus
    final_answer: str
    turns: int
    adapter_version: int
    error: str | None = None
    tool_calls: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupResult:
    analysis: QueryAnalysis
    results: list[RolloutResult]


@dataclass
class _Trajectory:
    request: R.RolloutRequest
    started: float
    history: list[TurnRecord] = field(default_factory=list)
    tool_calls: Counter[str] = field(default_factory=Counter)
    served_version: int | None = None
    result: RolloutResult | None = None
    analysis: QueryAnalysis | None = None

    @property
    def rollout_id(self) -> str:
        return str(self.request.envelope.rollout_id)

    def envelope(self, service: str, kind: str, turn: int | None) -> R.Envelope:
        env = self.request.envelope
        return R.Envelope.new(service, event_id=ids.rollout_event_id(kind, self.rollout_id, turn), task_id=env.task_id,
                              group_id=env.group_id, rollout_id=self.rollout_id, turn=turn)


def run_group(
    requests: Sequence[R.RolloutRequest],
    ctx: LoopContext,
    sink: EventSink,
    *,
    on_analysis: Callable[[QueryAnalysis], None] | None = None,
) -> GroupResult:
    """Run the trajectories of ``requests`` (one group, same question) in lockstep; emit their events."""
    results = run_groups([requests], ctx, sink, on_analysis=on_analysis)
    return results[0]


def run_groups(
    groups: Sequence[Sequence[R.RolloutRequest]],
    ctx: LoopContext,
    sink: EventSink,
    *,
    on_analysis: Callable[[QueryAnalysis], None] | None = None,
) -> list[GroupResult]:
    """Run several groups (each: one question) in lockstep: every turn, the active trajectories of ALL
    groups go into one ``policy.generate`` per (adapter, version, sampling). Each group's query is
    analysed once. Returns one :class:`GroupResult` per group, in order."""
    trajs: list[list[_Trajectory]] = []
    analyses: list[QueryAnalysis] = []
    for requests in groups:
        group = [_Trajectory(r, time.monotonic()) for r in requests]
        trajs.append(group)
        analysis = QueryAnalysis()
        if group:
            try:
                analysis = ctx.analyser.analyse(requests[0].question, list(ctx.tools))
            except MODEL_ERRORS as exc:
                for t in group:
                    _finish_error(t, ctx, sink, f"query analysis failed: {exc}")
            else:
                if on_analysis is not None:
                    on_analysis(analysis)
        for t in group:
            t.analysis = analysis
        analyses.append(analysis)
    tool_lines = [planner.tool_line(name, tool.spec.description, tool_example(tool)) for name, tool in ctx.tools.items()]
    turn = 0
    while active := [t for group in trajs for t in group if t.result is None]:
        turn += 1
        for traj, outcome in _plan_turn(active, turn, ctx, tool_lines):
            if isinstance(outcome, str):
                _finish_error(traj, ctx, sink, outcome)
            else:
                _act(traj, outcome, turn, ctx, sink)
    return [GroupResult(a, [t.result for t in group if t.result is not None]) for a, group in zip(analyses, trajs,
                                                                                                   strict=True)]


def _prompt_ids(traj: _Trajectory, ctx: LoopContext, tool_lines: list[str], final: bool = False) -> list[int]:
    """State prompt token ids; drops the oldest steps until it fits ``max_prompt_tokens``."""
    steps = ctx.history_steps
    while True:
        messages = planner.build_messages(traj.request.question, tool_lines, traj.analysis, traj.history,
                                          max_steps=steps, clip=ctx.observation_clip, final=final,
                                          example=ctx.example_key(traj.analysis))
        ids = ctx.policy.chat_prompt(messages) + _prefix_ids(ctx)
        if len(ids) <= ctx.max_prompt_tokens or steps <= 0:
            return ids
        steps -= 1


def _prefix_ids(ctx: LoopContext) -> list[int]:
    """Token ids of ``ctx.response_prefix`` ([] when unset or the policy has no tokenizer)."""
    tokenizer = getattr(ctx.policy, "tokenizer", None)
    if not ctx.response_prefix or tokenizer is None:
        return []
    return list(tokenizer.encode(ctx.response_prefix, add_special_tokens=False))


def effective_prefix(ctx: LoopContext) -> str:
    """The prefix actually forced (see :attr:`LoopContext.response_prefix`)."""
    return ctx.response_prefix if _prefix_ids(ctx) else ""


def _plan_turn(
    active: list[_Trajectory], turn: int, ctx: LoopContext, tool_lines: list[str],
) -> list[tuple[_Trajectory, Generation | str]]:
    """One batched ``generate`` per (adapter, version, sampling, answer turn) among ``active``; errors as strings."""
    out: list[tuple[_Trajectory, Generation | str]] = [
        (t, _given(t, turn, ctx, tool_lines)) for t in active if t.request.demonstration is not None]
    buckets: dict[tuple[str, int, R.SamplingParams, int], list[_Trajectory]] = {}
    for t in active:
        if t.request.demonstration is None:  # a demonstration's turns are given, not sampled
            key = (t.request.adapter_name, t.request.adapter_version, t.request.sampling, t.request.max_turns)
            buckets.setdefault(key, []).append(t)
    for (name, version, sampling, _), trajs in buckets.items():
        try:
            final = ctx.final_turn(trajs[0].request, turn)
            prompts = [_prompt_ids(t, ctx, tool_lines, final) for t in trajs]
            stop = JsonObjectEnd(effective_prefix(ctx)) if ctx.stop_at_json_end else None
            grammar = ctx.grammar_for(trajs[0].request)
            extra: dict[str, Any] = {}
            if grammar is not None:
                extra["logits_mask"] = GrammarMask(grammar, len(prompts), turn)  # local: masks; vLLM: sends it
            if ctx.sampling_seed is not None:  # one seed per row: a draw never depends on the call's other rows
                extra["seeds"] = [ctx.seed_for(t.request, turn) for t in trajs]
            gens = ctx.policy.generate(prompts, sampling, adapter_name=name, adapter_version=version, stop=stop,
                                       **extra)
        except MODEL_ERRORS as exc:
            out.extend((t, f"planner generation failed at turn {turn}: {type(exc).__name__}: {exc}") for t in trajs)
            continue
        if len(gens) != len(trajs):
            out.extend((t, f"policy returned {len(gens)} generations for {len(trajs)} prompts") for t in trajs)
            continue
        out.extend(zip(trajs, gens, strict=True))
    return out


def _given(traj: _Trajectory, turn: int, ctx: LoopContext, tool_lines: list[str]) -> Generation | str:
    """A demonstration's planner turn: its given step on the real state prompt (:mod:`.demonstration`)."""
    try:
        prompt = _prompt_ids(traj, ctx, tool_lines, ctx.final_turn(traj.request, turn))
    except MODEL_ERRORS as exc:
        return f"demonstration prompt failed at turn {turn}: {type(exc).__name__}: {exc}"
    return demonstration.given_step(traj.request, turn, prompt, prefix=effective_prefix(ctx),
                                    tokenizer=getattr(ctx.policy, "tokenizer", None),
                                    grammar=ctx.grammar_for(traj.request))


def _act(traj: _Trajectory, gen: Generation, turn: int, ctx: LoopContext, sink: EventSink) -> None:
    """Parse the planner's action, run the tool, verify; finish the trajectory when it stops."""
    req = traj.request
    traj.served_version = gen.adapter_version
    parsed = planner.parse(effective_prefix(ctx) + gen.text, answer_in_call=ctx.answer_in_call == "accept")
    step = parsed.value
    demo_source = demonstration.source_of(req)
    sink(R.PlannerAction(
        envelope=traj.envelope(ctx.service, "planner_action", turn), prompt_token_ids=list(gen.prompt_token_ids),
        action_text=gen.text, action_token_ids=list(gen.token_ids), behaviour_logprobs=list(gen.logprobs),
        adapter_name=gen.adapter_name, adapter_version=gen.adapter_version, sampling=applied_sampling(req, ctx, turn),
        parse_status=parsed.status, prompt_hash=planner.EXAMPLE_HASHES[ctx.example_key(traj.analysis)],
        latency_ms=gen.latency_ms, engine=gen.engine,
        tool=step.tool if step is not None else None, is_final=bool(step is not None and step.is_final),
        role=planner.ROLE, demo_source=demo_source,
    ))
    _count_action(gen, parsed.status)
    observation: Observation | None = None
    if demo_source is not None and (problem := demonstration.parse_problem(parsed, turn)):
        _finish_error(traj, ctx, sink, problem)
        return
    try:
        if step is not None and not step.is_final:
            observation = _execute(traj, step, ctx)
            sink(_observation_event(traj, observation, turn, ctx.service))
            metrics.current().inc(metrics.TOOL_CALLS, tool=observation.tool, outcome="error" if observation.error else "ok")
            if demo_source is not None and observation.error:
                _finish_error(traj, ctx, sink, demonstration.tool_problem(observation, turn))
                return
        traj.history.append(TurnRecord(turn, gen.text, parsed.status, step, parsed.error, observation))
        decision = ctx.verifier.decide(req.question, traj.history)
    except MODEL_ERRORS as exc:
        _finish_error(traj, ctx, sink, f"turn {turn} failed: {type(exc).__name__}: {exc}")
        return
    sink(_verdict_event(traj, decision, turn, ctx.service))
    if decision.stop:
        _finish(traj, ctx, sink, R.RolloutStatus.ANSWERED)
    elif demo_source is not None and turn >= demonstration.step_count(req):
        _finish_error(traj, ctx, sink, demonstration.unanswered(req))
    elif turn >= req.max_turns:
        _finish(traj, ctx, sink, R.RolloutStatus.MAX_TURNS)


def _count_action(gen: Generation, status: R.ParseStatus) -> None:
    m, engine = metrics.current(), gen.engine or "unknown"
    m.inc(metrics.PLANNER_ACTIONS, parse_status=status, engine=engine)
    m.inc(metrics.PLANNER_TOKENS, len(gen.token_ids), engine=engine)
    m.observe(metrics.PLANNER_DURATION, gen.latency_ms / 1000)


def applied_sampling(req: R.RolloutRequest, ctx: LoopContext, turn: int | None = None) -> R.SamplingParams:
    """The request's sampling parameters with ``constraint`` = the grammar actually applied (None: none) and,
    under ``sampling_seed``, ``seed`` = the seed ``turn``'s reply drew from (:meth:`LoopContext.seed_for`)."""
    grammar = ctx.grammar_for(req)
    constraint = grammar.descriptor if grammar is not None else None
    seed = ctx.seed_for(req, turn) if turn is not None and ctx.sampling_seed is not None else req.sampling.seed
    if req.sampling.constraint == constraint and req.sampling.seed == seed:
        return req.sampling
    return dataclasses.replace(req.sampling, constraint=constraint, seed=seed)


def _execute(traj: _Trajectory, step: Any, ctx: LoopContext) -> Observation:
    tool = ctx.tools.get(step.tool or "")
    traj.tool_calls[step.tool or "?"] += 1
    if tool is None:
        return unknown_tool(step.tool or "", step.input, list(ctx.tools), ctx.executor.mode)
    return ctx.executor.execute(traj.request.question, step, tool)


def _observation_event(traj: _Trajectory, obs: Observation, turn: int, service: str) -> R.ToolObservation:
    return R.ToolObservation(
        envelope=traj.envelope(service, "tool_observation", turn), tool=obs.tool, command=obs.command[:2000],
        output=obs.output, duration_ms=obs.duration_ms, executor_mode=obs.executor_mode,
        truncated=obs.truncated, error=obs.error, prompt_hash=obs.prompt_hash,
    )


def _verdict_event(traj: _Trajectory, decision: VerdictDecision, turn: int, service: str) -> R.Verdict:
    return R.Verdict(
        envelope=traj.envelope(service, "verdict", turn),
        decision=R.Decision.STOP if decision.stop else R.Decision.CONTINUE,
        analysis=decision.analysis[:1000], verifier_mode=decision.mode, prompt_hash=decision.prompt_hash,
    )


def _finish(traj: _Trajectory, ctx: LoopContext, sink: EventSink, status: R.RolloutStatus) -> None:
    try:
        answer = ctx.synthesiser.answer(traj.request.question, traj.history)
    except MODEL_ERRORS as exc:
        _finish_error(traj, ctx, sink, f"synthesiser failed: {type(exc).__name__}: {exc}")
        return
    _complete(traj, ctx, sink, status, answer, None)


def _finish_error(traj: _Trajectory, ctx: LoopContext, sink: EventSink, reason: str) -> None:
    _complete(traj, ctx, sink, R.RolloutStatus.ERROR, "", reason[:2000])


def _complete(
    traj: _Trajectory, ctx: LoopContext, sink: EventSink, status: R.RolloutStatus, answer: str, error: str | None,
) -> None:
    req = traj.request
    version = traj.served_version if traj.served_version is not None else req.adapter_version
    result = RolloutResult(traj.rollout_id, status, answer, len(traj.history), version, error, dict(traj.tool_calls))
    traj.result = result
    sink(R.RolloutCompleted(
        envelope=traj.envelope(ctx.service, "rollout_completed", None), question=req.question, source=req.source,
        final_answer=answer, turns=result.turns, status=status, group_size=req.group_size,
        adapter_name=req.adapter_name, adapter_version=version,
        duration_ms=int((time.monotonic() - traj.started) * 1000), error=error, tool_calls=dict(traj.tool_calls),
        demo_source=demonstration.source_of(req),
    ))
    metrics.current().inc(metrics.ROLLOUTS, status=status)
    metrics.current().observe(metrics.ROLLOUT_DURATION, time.monotonic() - traj.started)


def fail_group(requests: Sequence[R.RolloutRequest], ctx: LoopContext, sink: EventSink, reason: str) -> GroupResult:
    """End every rollout of ``requests`` as ERROR with ``reason`` without running it (e.g. adapter unavailable)."""
    trajs = [_Trajectory(r, time.monotonic()) for r in requests]
    for t in trajs:
        _finish_error(t, ctx, sink, reason)
    return GroupResult(QueryAnalysis(), [t.result for t in trajs if t.result is not None])
