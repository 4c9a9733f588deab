"""The arithmetic of an evaluation (pure: no model, no I/O).

One :class:`Outcome` per evaluated rollout; :func:`summarise` turns them into the figures of an
``EvaluationCompleted`` event; :func:`paired_difference` compares two versions evaluated on the
same tasks.

Statistics:
- ``k = 1`` (one rollout per task, e.g. greedy): accuracy is a binomial proportion over tasks and
  its 95% interval is the Wilson score interval (good coverage at small n and near 0 or 1).
- ``k > 1``: accuracy is mean@k = the mean over tasks of each task's share of correct samples;
  its interval is the normal interval of that mean from the between-task standard error
  (samples of one task are not independent), clipped to [0, 1]. ``pass_at_k`` is the share of
  tasks with at least one correct sample.
- Two versions on the same tasks: the paired difference of per-task scores, with the normal
  interval of the mean difference (the pairing removes the between-task variance).

What is not covered: multiple-comparison corrections across many versions.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Outcome:
    """One evaluated rollout."""

    task: int  # index of the task in the evaluated set
    kind: str  # task kind (metadata "kind"), "" when unknown
    correct: bool
    answered: bool  # the rollout ended ANSWERED
    turns: int
    tool_calls: int
    tokens: int  # generated planner tokens
    actions: int  # planner actions
    parse_failures: int  # planner actions that did not parse
    error: str | None = None


@dataclass(frozen=True)
class Summary:
    """The figures of one evaluation."""

    tasks: int
    samples_per_task: int
    accuracy: float
    ci_low: float
    ci_high: float
    pass_at_k: float | None
    answered_rate: float
    parse_failure_rate: float
    tool_calls_per_task: float
    mean_turns: float
    tokens_per_task: float
    errors: int
    per_kind: dict[str, float] = field(default_factory=dict)


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when n == 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float], z: float = Z95) -> tuple[float, float, float]:
    """(mean, low, high): normal interval of the mean of ``values`` (half-width 0 for one value)."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, mean, mean
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = z * math.sqrt(var / n)
    return mean, mean - half, mean + half


def task_scores(outcomes: Sequence[Outcome]) -> dict[int, float]:
    """Per task: the share of its samples that were correct."""
    by_task: dict[int, list[bool]] = defaultdict(list)
    for o in outcomes:
        by_task[o.task].append(o.correct)
    return {t: sum(v) / len(v) for t, v in sorted(by_task.items())}


def summarise(outcomes: Sequence[Outcome]) -> Summary:
    """The figures of the module docstring over ``outcomes`` (one or more rollouts per task)."""
    if not outcomes:
        raise ValueError("nothing was evaluated")
    scores = task_scores(outcomes)
    k = max(sum(1 for o in outcomes if o.task == t) for t in scores)
    n = len(outcomes)
    if k == 1:
        correct = sum(o.correct for o in outcomes)
        accuracy = correct / n
        low, high = wilson(correct, n)
        pass_at_k = None
    else:
        accuracy, low, high = mean_interval(list(scores.values()))
        low, high = max(0.0, low), min(1.0, high)
        pass_at_k = sum(1 for t in scores if any(o.correct for o in outcomes if o.task == t)) / len(scores)
    kinds: dict[str, list[bool]] = defaultdict(list)
    for o in outcomes:
        kinds[o.kind or "?"].append(o.correct)
    actions = sum(o.actions for o in outcomes)
    return Summary(
        tasks=len(scores), samples_per_task=k, accuracy=accuracy, ci_low=low, ci_high=high, pass_at_k=pass_at_k,
        answered_rate=sum(o.answered for o in outcomes) / n,
        parse_failure_rate=sum(o.parse_failures for o in outcomes) / actions if actions else 0.0,
        tool_calls_per_task=sum(o.tool_calls for o in outcomes) / n,
        mean_turns=sum(o.turns for o in outcomes) / n,
        tokens_per_task=sum(o.tokens for o in outcomes) / n,
        errors=sum(1 for o in outcomes if o.error),
        per_kind={kind: sum(v) / len(v) for kind, v in sorted(kinds.items())},
    )


@dataclass(frozen=True)
class Difference:
    """``b - a`` on the tasks both evaluated."""

    tasks: int
    mean: float
    ci_low: float
    ci_high: float
    a_only: int  # tasks a got right and b did not (k = 1)
    b_only: int


def paired_difference(a: Sequence[Outcome], b: Sequence[Outcome]) -> Difference:
    """Paired difference of per-task scores, ``b - a`` (see module docstring)."""
    sa, sb = task_scores(a), task_scores(b)
    common = sorted(set(sa) & set(sb))
    if not common:
        raise ValueError("the two evaluations share no task")
    diffs = [sb[t] - sa[t] for t in common]
    mean, low, high = mean_interval(diffs)
    return Difference(len(common), mean, low, high, sum(1 for d in diffs if d < 0), sum(1 for d in diffs if d > 0))


def task_set_hash(questions_and_truths: Sequence[tuple[str, Sequence[str]]]) -> str:
    """First 16 hex digits of sha256 over the evaluated questions and their ground truths, in order."""
    digest = hashlib.sha256()
    for question, truths in questions_and_truths:
        digest.update(question.encode("utf-8") + b"\x1f" + "\x1e".join(truths).encode("utf-8") + b"\x1d")
    return digest.hexdigest()[:16]


def proportional_sample(kinds: Sequence[str], n: int) -> list[int]:
    """Indices (ascending) of ``n`` of the tasks whose kinds are ``kinds``, each kind in proportion to its share of
    the set: largest remainders (ties to the kind seen first), spread evenly over each kind's tasks in the set's
    order. Every kind present keeps at least one task when ``n`` allows it. All of them when ``n >= len(kinds)``.

    The evaluator's in-loop sample: its accuracy estimates the same quantity as an evaluation of the whole set,
    where "the first n" of a set interleaved kind by kind over-weights the small kinds."""
    if n >= len(kinds):
        return list(range(len(kinds)))
    by_kind: dict[str, list[int]] = defaultdict(list)
    for index, kind in enumerate(kinds):
        by_kind[kind].append(index)
    order = list(by_kind)  # first appearance
    quota = {k: n * len(by_kind[k]) // len(kinds) for k in order}
    if n >= len(order):  # a kind too small for its share still gets one task
        for k in order:
            quota[k] = max(quota[k], 1)
    while sum(quota.values()) > n:  # the floors of one-task kinds overshot: take from the largest quota
        largest = max(order, key=lambda k: (quota[k], -order.index(k)))
        quota[largest] -= 1
    remainders = sorted(order, key=lambda k: (-(n * len(by_kind[k]) % len(kinds)), order.index(k)))
    for k in remainders[: n - sum(quota.values())]:
        quota[k] += 1
    chosen: list[int] = []
    for k in order:
        members = by_kind[k]
        chosen += [members[i * len(members) // quota[k]] for i in range(quota[k])]
    return sorted(chosen)
