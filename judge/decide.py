"""The judge's decision, as pure functions: (task, rollout, scorer, cache) -> Reward | Reject.

Every rollout gets exactly one Reward with the deterministic id ``ids.reward_id(rollout_id)``
and the envelope ids of the rollout (task_id, group_id, rollout_id), so the group window always
learns that the rollout finished, and a redelivery produces the same id (dropped downstream).

| situation                                   | Reward status | dead letter (reason code)  |
|---------------------------------------------|---------------|----------------------------|
| rollout status ERROR                        | ERROR (rollout's error text) | none        |
| task unknown (after the service's wait)     | ERROR         | ``unknown_task``            |
| judge needs ground truth, task has none     | ERROR         | ``missing_ground_truth``    |
| judge failed and no fallback was possible   | ERROR         | ``judge_error``             |
| otherwise                                   | OK, the judge's score (cached=True from the cache) | none |
| a demonstration that did not end ANSWERED   | as above      | ``demonstration_failed``    |
| a demonstration scored below the success threshold | as above | ``demonstration_wrong`` |

A Reject carries both: the reason for ``dead-letters`` and the ERROR Reward for ``rewards``
(ERROR rewards are never trained on; no score is ever made up: their score is 0.0 and ignored).
MAX_TURNS rollouts are scored like answered ones (the hybrid judge's format component sees it).
What is not covered: I/O (see service.py); deduplication (consumers drop by event id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.judge.cache import ScoreCache
from streamgrpo.judge.errors import ScoringError
from streamgrpo.judge.scorers.base import Candidate, Score, Scorer
from streamgrpo.lifecycle.stats import SUCCESS_THRESHOLD

SERVICE = "judge"


@dataclass(frozen=True)
class Reject:
    """A rollout the judge cannot score: dead-letter reason plus the ERROR Reward to emit."""

    reason_code: str
    reason: str
    reward: R.Reward


def candidate_of(task: R.Task, rollout: R.RolloutCompleted) -> Candidate:
    return Candidate(
        question=task.question or rollout.question,
        answer=rollout.final_answer,
        ground_truths=tuple(task.ground_truths),
        status=rollout.status.value,
        turns=rollout.turns,
        tool_calls=dict(rollout.tool_calls),
    )


def _reward(
    rollout: R.RolloutCompleted, judge: R.JudgeInfo, *, score: float, status: R.RewardStatus,
    error: str | None = None, components: Sequence[tuple[str, float, float]] = (), cached: bool = False,
) -> R.Reward:
    env = rollout.envelope
    return R.Reward(
        envelope=R.Envelope.new(
            SERVICE, event_id=ids.reward_id(env.rollout_id), task_id=env.task_id,
            group_id=env.group_id, rollout_id=env.rollout_id,
        ),
        score=score, status=status, judge=judge, group_size=rollout.group_size,
        adapter_name=rollout.adapter_name, adapter_version=rollout.adapter_version, turns=rollout.turns,
        rollout_status=rollout.status, error=error,
        components=[R.RewardComponent(n, float(v), float(w)) for n, v, w in components],
        cached=cached, tool_calls=dict(rollout.tool_calls), demo_source=rollout.demo_source,
    )


def error_reward(rollout: R.RolloutCompleted, scorer: Scorer, error: str) -> R.Reward:
    """The ERROR Reward of a rollout (score 0.0, never trained on); provenance = the routed judge."""
    judge = R.JudgeInfo(name=scorer.name, rubric_hash=scorer.rubric_hash, model=None)
    return _reward(rollout, judge, score=0.0, status=R.RewardStatus.ERROR, error=error[:2000])


def score_reward(rollout: R.RolloutCompleted, score: Score, *, cached: bool) -> R.Reward:
    """The OK Reward carrying ``score`` and its provenance."""
    judge = R.JudgeInfo(name=score.judge_name, rubric_hash=score.rubric_hash, model=score.model)
    return _reward(rollout, judge, score=score.score, status=R.RewardStatus.OK,
                   components=score.components, cached=cached)


def precheck(task: R.Task | None, rollout: R.RolloutCompleted, scorer: Scorer) -> R.Reward | Reject | None:
    """The outcome when the rollout cannot be scored, else None."""
    env = rollout.envelope
    if rollout.status == R.RolloutStatus.ERROR:
        return error_reward(rollout, scorer, f"rollout failed: {rollout.error or 'no error text'}")
    if task is None:
        reason = f"no Task with id {env.task_id} for rollout {env.rollout_id}"
        return Reject("unknown_task", reason, error_reward(rollout, scorer, reason))
    if scorer.needs_ground_truth and not task.ground_truths:
        reason = f"judge {scorer.name} needs a ground truth and task {env.task_id} (source {task.source}) has none"
        return Reject("missing_ground_truth", reason, error_reward(rollout, scorer, reason))
    return None


def vet_demonstration(rollout: R.RolloutCompleted, outcome: R.Reward | Reject) -> R.Reward | Reject:
    """A demonstration's outcome: its Reward stands only when it ended ANSWERED and its answer is correct (score >=
    :data:`~streamgrpo.lifecycle.stats.SUCCESS_THRESHOLD`); otherwise a Reject, so it is dead-lettered with the
    reason and never trains (``demonstration_failed``: a step refused, a tool call failed, no answer;
    ``demonstration_wrong``: the judge scored the answer wrong). A rollout the policy sampled passes unchanged."""
    source = rollout.demo_source
    if source is None or isinstance(outcome, Reject):
        return outcome
    if rollout.status != R.RolloutStatus.ANSWERED:
        return Reject("demonstration_failed", f"demonstration ({source}) of task {rollout.envelope.task_id} did not "
                      f"end with an answer: {rollout.error or rollout.status.value}", outcome)
    if outcome.status != R.RewardStatus.OK or not outcome.score >= SUCCESS_THRESHOLD:
        return Reject("demonstration_wrong", f"demonstration ({source}) of task {rollout.envelope.task_id}: answer "
                      f"{rollout.final_answer[:200]!r} scored {outcome.score} by judge {outcome.judge.name} "
                      f"(a demonstration must score >= {SUCCESS_THRESHOLD})", outcome)
    return outcome


def decide_reward(
    task: R.Task | None, rollout: R.RolloutCompleted, scorer: Scorer, cache: ScoreCache | None = None
) -> R.Reward | Reject:
    """Score one rollout (see the table in the module docstring); a demonstration is vetted (:func:`vet_demonstration`)."""
    return vet_demonstration(rollout, _decide_reward(task, rollout, scorer, cache))


def _decide_reward(
    task: R.Task | None, rollout: R.RolloutCompleted, scorer: Scorer, cache: ScoreCache | None = None
) -> R.Reward | Reject:
    early = precheck(task, rollout, scorer)
    if early is not None:
        return early
    assert task is not None
    candidate = candidate_of(task, rollout)
    hit = cache.get(scorer, candidate) if cache is not None else None
    if hit is not None:
        return score_reward(rollout, hit, cached=True)
    try:
        score = scorer.score(candidate)
    except ScoringError as exc:
        return Reject("judge_error", str(exc), error_reward(rollout, scorer, str(exc)))
    if cache is not None:
        cache.put(scorer, candidate, score)
    return score_reward(rollout, score, cached=False)


def decide_group(
    task: R.Task | None, rollouts: Sequence[R.RolloutCompleted], scorer: Scorer
) -> list[R.Reward | Reject]:
    """Groupwise judges: one ``score_group`` call for every scorable rollout of a group, in order."""
    outcomes: list[R.Reward | Reject | None] = [precheck(task, r, scorer) for r in rollouts]
    todo = [i for i, o in enumerate(outcomes) if o is None]
    if todo:
        assert task is not None
        try:
            scores = scorer.score_group([candidate_of(task, rollouts[i]) for i in todo])
        except ScoringError as exc:
            for i in todo:
                outcomes[i] = Reject("judge_error", str(exc), error_reward(rollouts[i], scorer, str(exc)))
        else:
            for i, score in zip(todo, scores, strict=True):
                outcomes[i] = score_reward(rollouts[i], score, cached=False)
    return [vet_demonstration(r, o) for r, o in zip(rollouts, outcomes, strict=True) if o is not None]
