"""Run the agent as it is served on a task set and count what it got right.

:func:`evaluate` builds ``samples`` RolloutRequests per task for ONE adapter version, runs them
through the real agent loop (:func:`streamgrpo.rollout.loop.run_groups`: the planner policy, tools,
verifier and synthesiser of the rollout settings), many tasks at once in lockstep (``batch_size``
tasks per batch: one batched planner call per turn), and judges every final answer with
correctness alone (:mod:`.judging`). Events the loop emits are read in memory, never published:
an evaluation is not training data.

Request ids are derived from (task set, version, task, sample), so the same evaluation twice
produces the same ids. Greedy decoding (``temperature = 0``) is the default of the CLI.

What is covered: one version per call (the caller loops over versions and loads adapters).
What is not covered: loading adapters (see :mod:`.adapters`), publishing (see :mod:`.cli`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.evaluation.core import Outcome, Summary, summarise, task_set_hash
from streamgrpo.evaluation.judging import CorrectnessJudge
from streamgrpo.rollout.loop import LoopContext, run_groups
from streamgrpo.tasks.datasets import TaskRow


@dataclass(frozen=True)
class EvalSpec:
    """How to evaluate (the same for every version compared)."""

    task_set: str
    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    max_turns: int = 4
    batch_size: int = 16
    seed: int = 0


@dataclass
class EvalRun:
    """The result of evaluating one version."""

    adapter_name: str
    version: int
    spec: EvalSpec
    task_hash: str
    outcomes: list[Outcome]
    summary: Summary
    seconds: float
    answers: list[str] = field(default_factory=list)

    def event(self, judge: R.JudgeInfo, trigger: str = "cli", service: str = "eval") -> R.EvaluationCompleted:
        s = self.summary
        env = R.Envelope.new(service, event_id=ids.evaluation_id(self.task_hash, self.adapter_name, self.version,
                                                                 self.spec, trigger, time.time_ns()))
        return R.EvaluationCompleted(
            envelope=env, adapter_name=self.adapter_name, adapter_version=self.version,
            task_set=self.spec.task_set, task_set_hash=self.task_hash, tasks=s.tasks,
            samples_per_task=s.samples_per_task, temperature=self.spec.temperature, accuracy=s.accuracy,
            ci_low=s.ci_low, ci_high=s.ci_high, pass_at_k=s.pass_at_k, answered_rate=s.answered_rate,
            parse_failure_rate=s.parse_failure_rate, tool_calls_per_task=s.tool_calls_per_task,
            mean_turns=s.mean_turns, tokens_per_task=s.tokens_per_task, seconds=self.seconds, judge=judge,
            trigger=trigger, per_kind=dict(s.per_kind),
            metrics={"errors": float(s.errors), "max_turns": float(self.spec.max_turns),
                     "max_new_tokens": float(self.spec.max_new_tokens)},
        )


class _Collector:
    """Event sink: the events of each rollout, in memory."""

    def __init__(self) -> None:
        self.actions: dict[str, list[R.PlannerAction]] = defaultdict(list)
        self.completed: dict[str, R.RolloutCompleted] = {}

    def __call__(self, event: R.Event) -> None:
        rid = str(event.envelope.rollout_id)
        if isinstance(event, R.PlannerAction):
            self.actions[rid].append(event)
        elif isinstance(event, R.RolloutCompleted):
            self.completed[rid] = event


def _requests(tasks: Sequence[TaskRow], spec: EvalSpec, task_hash: str, adapter_name: str,
              version: int) -> list[list[R.RolloutRequest]]:
    sampling = R.SamplingParams(temperature=spec.temperature, top_p=spec.top_p,
                                max_new_tokens=spec.max_new_tokens, seed=spec.seed)
    groups = []
    for i, task in enumerate(tasks):
        group_id = ids.eval_group_id(task_hash, adapter_name, version, i)
        groups.append([
            R.RolloutRequest(
                envelope=R.Envelope.new("eval", event_id=ids.eval_request_id(group_id, j),
                                        task_id=ids.eval_task_id(task_hash, i), group_id=group_id,
                                        rollout_id=ids.eval_rollout_id(group_id, j)),
                question=task.question, source=task.source, rollout_index=j, group_size=spec.samples,
                adapter_name=adapter_name, adapter_version=version, max_turns=spec.max_turns, sampling=sampling,
                metadata=dict(task.metadata))
            for j in range(spec.samples)
        ])
    return groups


def evaluate(ctx: LoopContext, tasks: Sequence[TaskRow], spec: EvalSpec, judge: CorrectnessJudge, *,
             adapter_name: str, version: int, progress: Callable[[int, int, float], None] | None = None) -> EvalRun:
    """Evaluate ``adapter_name@v{version}`` (0 = base model; it must be resident in ``ctx.policy``)."""
    task_hash = task_set_hash([(t.question, t.ground_truths) for t in tasks])
    groups = _requests(tasks, spec, task_hash, adapter_name, version)
    outcomes: list[Outcome] = []
    answers: list[str] = []
    started = time.monotonic()
    for lo in range(0, len(groups), spec.batch_size):
        sink = _Collector()
        run_groups(groups[lo:lo + spec.batch_size], ctx, sink)
        for i, group in enumerate(groups[lo:lo + spec.batch_size], start=lo):
            for request in group:
                outcome, answer = _outcome(i, tasks[i], request, sink, judge)
                outcomes.append(outcome)
                answers.append(answer)
        if progress is not None:
            done = min(len(groups), lo + spec.batch_size)
            progress(done, len(groups), sum(o.correct for o in outcomes) / len(outcomes))
    return EvalRun(adapter_name, version, spec, task_hash, outcomes, summarise(outcomes),
                   time.monotonic() - started, answers)


def _outcome(index: int, task: TaskRow, request: R.RolloutRequest, sink: _Collector,
             judge: CorrectnessJudge) -> tuple[Outcome, str]:
    rid = str(request.envelope.rollout_id)
    done = sink.completed.get(rid)
    actions = sink.actions.get(rid, [])
    answer = done.final_answer if done is not None else ""
    status = done.status if done is not None else R.RolloutStatus.ERROR
    correct = status is not R.RolloutStatus.ERROR and judge.correct(task.source, task.question, answer,
                                                                   list(task.ground_truths))
    return Outcome(
        task=index, kind=task.metadata.get("kind", ""), correct=correct,
        answered=status is R.RolloutStatus.ANSWERED, turns=done.turns if done is not None else 0,
        tool_calls=sum(done.tool_calls.values()) if done is not None else 0,
        tokens=sum(len(a.action_token_ids) for a in actions), actions=len(actions),
        parse_failures=sum(1 for a in actions if a.parse_status is R.ParseStatus.FAILED),
        error=(done.error if done is not None else "no RolloutCompleted"),
    ), answer
