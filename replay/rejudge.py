"""Re-judge history with another judge: new Rewards, advantages and TrainingSamples for a range's groups.

:func:`rejudge_group` is pure apart from the judge itself: it scores every completed rollout of one
group with the judge's own decision functions (:func:`~streamgrpo.judge.decide.decide_reward`, or
:func:`~streamgrpo.judge.decide.decide_group` for groupwise judges), then closes the group with the
stream processors' window core (:mod:`streamgrpo.streams.window_core`: the same estimator, zero-variance
rule and partial-group policy as the live window) and builds each trainable rollout's TrainingSample
from its planner actions (:func:`~streamgrpo.streams.samples.build_sample`). The new events carry ids of
their own (:func:`~streamgrpo.avro.ids.rejudged_reward_id`, :func:`~streamgrpo.avro.ids.rejudged_sample_id`)
so they can sit beside the originals (the ``judge-disagreement`` report compares them).

:func:`load_groups` gathers what the judge needs for the groups of the selected samples: their Task
(ground truths), their RolloutCompleted events and every rollout's PlannerActions.
What is not covered: groups whose samples are outside the range (a group that never trained under the
first judge has no sample to select it by), rollouts whose events the history no longer holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.judge.decide import Reject, decide_group, decide_reward
from streamgrpo.judge.scorers import Scorer
from streamgrpo.replay.sources import History
from streamgrpo.streams import window_core as W
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.streams.samples import build_sample
from streamgrpo.topics import catalog


@dataclass
class GroupHistory:
    """What the history holds about one group."""

    group_id: str
    estimator: str
    task: R.Task | None = None
    rollouts: list[R.RolloutCompleted] = field(default_factory=list)
    actions: dict[str, list[R.PlannerAction]] = field(default_factory=dict)  # rollout_id -> its turns


@dataclass(frozen=True)
class Rejudged:
    rewards: list[R.Reward]
    samples: list[R.TrainingSample]
    closed: R.GroupClosed | None


def _score(group: GroupHistory, scorer: Scorer) -> list[R.Reward]:
    rollouts = sorted(group.rollouts, key=lambda r: r.envelope.rollout_id or "")
    if scorer.groupwise:
        outcomes = decide_group(group.task, rollouts, scorer)
    else:
        outcomes = [decide_reward(group.task, r, scorer) for r in rollouts]
    rewards = [o.reward if isinstance(o, Reject) else o for o in outcomes]
    return [dataclasses.replace(r, envelope=dataclasses.replace(
        r.envelope, event_id=ids.rejudged_reward_id(r.envelope.rollout_id or "", r.judge.name, r.judge.rubric_hash)))
        for r in rewards]


def rejudge_group(group: GroupHistory, scorer: Scorer, *, partial_policy: str = "score",
                  min_group_size: int = 2) -> Rejudged:
    """Score, close and sample one group under ``scorer`` (see the module docstring)."""
    if not group.rollouts:
        return Rejudged([], [], None)
    rewards = _score(group, scorer)
    # timeout 0: a group the history holds only part of closes as the live window's timeout would close it
    policy = W.WindowPolicy(group.estimator, build_estimator(group.estimator), 0.0, partial_policy, min_group_size)
    task_id = group.rollouts[0].envelope.task_id
    state = W.new_state(group.group_id, task_id, max(r.group_size for r in group.rollouts), 0.0, 0)
    for done in group.rollouts:
        state = W.add_completed(state, done)
    for reward in rewards:
        state, _ = W.add_reward(state, reward)
    state, closed = W.maybe_close(state, policy, 0.0)
    samples = []
    for rollout in sorted(state.advantages):
        turns = group.actions.get(rollout, [])
        if not turns or len({a.envelope.turn for a in turns}) < state.turns_expected.get(rollout, 0):
            continue  # the history lost some of its planner turns
        sample = build_sample(state, rollout, turns)
        judge = next(r.judge for r in rewards if r.envelope.rollout_id == rollout)
        samples.append(dataclasses.replace(sample, envelope=dataclasses.replace(
            sample.envelope, event_id=ids.rejudged_sample_id(rollout, judge.name, judge.rubric_hash))))
    return Rejudged(rewards, samples, closed)


def load_groups(history: History, samples: Sequence[R.TrainingSample]) -> list[GroupHistory]:
    """The groups of ``samples`` (in their order of first appearance), filled from ``history``."""
    groups: dict[str, GroupHistory] = {}
    for s in samples:
        gid = s.envelope.group_id or ""
        groups.setdefault(gid, GroupHistory(gid, s.estimator))
    tasks = {g.task_id: None for g in (s.envelope for s in samples) if g.task_id}
    rollouts: dict[str, str] = {}
    for event, _ in history.events(catalog.ROLLOUTS):
        if isinstance(event, R.RolloutCompleted) and event.envelope.group_id in groups:
            group = groups[event.envelope.group_id]
            rid = event.envelope.rollout_id or ""
            if rid not in rollouts:
                rollouts[rid] = group.group_id
                group.rollouts.append(event)
    for event, _ in history.events(catalog.PLANNER_ACTIONS):
        rid = event.envelope.rollout_id or ""
        if isinstance(event, R.PlannerAction) and rid in rollouts:
            turns = groups[rollouts[rid]].actions.setdefault(rid, [])
            if all(a.envelope.turn != event.envelope.turn for a in turns):
                turns.append(event)
    found: dict[str, R.Task] = {}
    for event, _ in history.events(catalog.TASKS):
        if isinstance(event, R.Task) and event.envelope.task_id in tasks:
            found.setdefault(event.envelope.task_id or "", event)
    for group in groups.values():
        task_id = group.rollouts[0].envelope.task_id if group.rollouts else None
        group.task = found.get(task_id or "")
    return list(groups.values())
