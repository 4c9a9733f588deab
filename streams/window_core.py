"""Advantage window of one group, as pure functions on a :class:`GroupState` (no I/O, no clock).

A group collects one Reward per rollout (deduplicated by event id and by rollout id). It closes:
- COMPLETE when every one of its ``expected`` rollouts has a reward (usable or not);
- TIMED_OUT when ``now - first_seen >= timeout``: with policy ``score`` it is scored with the usable
  rewards that arrived if there are at least ``min_group_size``; with ``drop`` (or too few) it does
  not train. Either way a GroupClosed lists ``missing_rollout_ids``.

ERROR rewards count as arrived (they complete the group) but are unusable: they get no advantage and
their rollout yields no TrainingSample. Human rewards (provenance ``human:<name>``, from ``streamgrpo
label``) are used ahead of the judge's while the group is open (:func:`add_reward`); a closed group
is never reopened, so a label that comes after the group closed changes no advantage. To give people time to
label, a review hold keeps a COMPLETE group open after its last reward arrived (``complete_at``), unless every
usable reward is already a person's; the hold is bounded, so an unlabelled group still trains (on the judge's
rewards) once it ends. Which groups are held, and how long (:func:`review_hold`): a group opened for review -- one
whose rollouts ``streamgrpo serve`` answered to a client (a RolloutCompleted whose ``source`` is the
``mcp:<client>`` serve writes: :data:`SERVED_SOURCE`; MCP ``feedback`` is only for those) -- for
``served_review_hold_s`` (never a demonstration, whatever its source); every group for ``review_hold_s`` (0 by
default: an operator who reviews training groups with ``streamgrpo label`` opts in); the longer of the two applies.
A group of one rollout that is not a demonstration (such a group trains nothing) is held as a served one until its
RolloutCompleted says where it came from, so that a judge's reward that reaches the window before the
RolloutCompleted does not close a served group unheld. A zero-variance group (all usable rewards equal) closes with
``trains=False, reason="zero_variance"`` and yields no samples.

A demonstration's group (``demo_source`` set, from its RolloutCompleted or Reward) has one rollout: it trains when
its reward is usable and correct (``reason="demonstration"``, advantage :data:`DEMONSTRATION_ADVANTAGE`; the trainer
trains it by likelihood), else it closes with ``reason="demonstration_rejected"`` (the judge dead-lettered it).

The A/B test's control arm (``control``, the caller's predicate on the group's version: see
:func:`~streamgrpo.streams.ab_controller.comparison_only`): a group that would train but whose samples would reach
the trainer stale closes with ``trains=False, reason=`` :data:`~streamgrpo.lifecycle.pacing.CONTROL_ARM`,
``samples=0`` and its reward mean and std (it was served and judged for the comparison); it yields no sample.

Intake bounds (:func:`out_of_bounds`): a Reward or RolloutCompleted whose ``group_size`` is outside
1..:data:`~streamgrpo.topics.limits.MAX_GROUP_SIZE`, or a rollout claiming more than
:data:`~streamgrpo.topics.limits.MAX_TURNS` planner turns, is rejected before it sizes the window's
work (the missing-rollout list, the turn probes); the shell dead-letters it.

The state also records how many planner turns each rollout took (from RolloutCompleted), so
:mod:`streamgrpo.streams.samples` can tell when a rollout's sample is complete. What is not covered:
the planner actions themselves (the caller keeps them, keyed by rollout and turn, and answers
"has turn t of rollout r arrived?").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.pacing import CONTROL_ARM
from streamgrpo.lifecycle.stats import SUCCESS_THRESHOLD, is_human
from streamgrpo.streams.advantages import Estimator
from streamgrpo.topics.limits import MAX_GROUP_SIZE, MAX_TURNS

#: ``GroupClosed.reason`` of a demonstration's group that trains (by likelihood: its sample's advantage is
#: :data:`DEMONSTRATION_ADVANTAGE`, the weight of the likelihood term, not a group-relative advantage).
DEMONSTRATION = "demonstration"
DEMONSTRATION_ADVANTAGE = 1.0
#: The start of the Task ``source`` of a call ``streamgrpo serve`` answered (``mcp:<client>``: serve.agent's
#: served_request), which its rollouts' RolloutCompleted carry: the mark of a group opened for review.
SERVED_SOURCE = "mcp:"


@dataclass(frozen=True)
class WindowPolicy:
    """How groups close (from :class:`~streamgrpo.streams.config.StreamsSettings`)."""

    estimator_name: str
    estimator: Estimator
    timeout_s: float
    partial_policy: str  # "score" | "drop"
    min_group_size: int
    review_hold_s: float = 0.0  # keep every complete group open this long for human labels (0 = close at once)
    served_review_hold_s: float = 0.0  # keep a complete group served to a client (opened for review) open this long


@dataclass(frozen=True)
class RewardEntry:
    event_id: str
    score: float
    usable: bool
    adapter_name: str
    adapter_version: int
    human: bool = False  # provenance human:<name> (``streamgrpo label``)


@dataclass
class GroupState:
    """Everything the window knows about one group. Stored as a dict in a Faust table."""

    group_id: str
    task_id: str | None
    expected: int
    first_seen: float
    partition: int
    rewards: dict[str, RewardEntry] = field(default_factory=dict)
    turns_expected: dict[str, int] = field(default_factory=dict)
    closed: bool = False
    closed_at: float | None = None
    trains: bool = False
    advantages: dict[str, float] = field(default_factory=dict)
    mean: float = 0.0
    std: float = 0.0
    size: int = 0
    estimator: str = ""
    emitted: list[str] = field(default_factory=list)
    complete_at: float | None = None  # when the last expected reward arrived (start of the review hold)
    demo_source: str | None = None  # the group executed a demonstration (RolloutCompleted / Reward.demo_source)
    served: bool | None = None  # its rollouts were served to a client (SERVED_SOURCE); None: no RolloutCompleted yet

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroupState:
        return cls.restored(d)[0]

    @classmethod
    def restored(cls, d: dict[str, Any]) -> tuple[GroupState, list[str]]:
        """The state stored as ``d`` and what was repaired in it (empty: nothing). A state stored by an older release
        may hold what the intake now refuses: a reward whose score :func:`reward_problem` refuses (NaN, inf, a
        person's outside [0, 1]) is dropped, as if it never arrived; a closed group whose mean, std or advantages
        are not finite trains nothing (its samples would carry them)."""
        from streamgrpo.topics.sdk import score_problem

        d = dict(d)
        rewards, notes = {}, []
        for k, v in d.get("rewards", {}).items():
            entry = RewardEntry(**v)
            problem = score_problem(entry.score, human=entry.human)
            if problem is None:
                rewards[k] = entry
            else:
                notes.append(f"reward of rollout {k} dropped: {problem}")
        d["rewards"] = rewards
        state = cls(**d)
        stats = [state.mean, state.std, *state.advantages.values()]
        if state.closed and not all(math.isfinite(x) for x in stats):
            notes.append("closed with a non-finite mean, std or advantage: trains nothing")
            state = replace(state, trains=False, advantages={}, mean=0.0, std=0.0)
        return state, notes


def out_of_bounds(event: R.Event) -> str | None:
    """Why a window input is beyond the contract's bounds, or None."""
    if isinstance(event, (R.Reward, R.RolloutCompleted)) and not 1 <= event.group_size <= MAX_GROUP_SIZE:
        return f"group_size {event.group_size} is outside 1..{MAX_GROUP_SIZE}"
    turns = event.turns if isinstance(event, R.RolloutCompleted) else event.envelope.turn or 0
    if isinstance(event, (R.RolloutCompleted, R.PlannerAction)) and not 0 <= turns <= MAX_TURNS:
        return f"turn count {turns} is outside 0..{MAX_TURNS}"
    return None


def new_state(group_id: str, task_id: str | None, expected: int, now: float, partition: int) -> GroupState:
    return GroupState(group_id=group_id, task_id=task_id, expected=expected, first_seen=now, partition=partition)


def reward_problem(reward: R.Reward) -> str | None:
    """Why ``reward``'s score may not enter a group's fold, or None (the shell dead-letters such a Reward): every
    score is finite and of magnitude at most :data:`~streamgrpo.topics.sdk.MAX_ABS_SCORE`; a person's (provenance
    ``human:<name>``) is in [0, 1], the range ``streamgrpo label``, the SDK and MCP ``feedback`` write."""
    from streamgrpo.topics.sdk import score_problem

    problem = score_problem(reward.score, human=is_human(reward))
    return None if problem is None else f"Reward of rollout {reward.envelope.rollout_id}: {problem}"


def add_reward(state: GroupState, reward: R.Reward) -> tuple[GroupState, bool]:
    """Record ``reward``; returns (state, accepted). Duplicates, late rewards and rewards with a score
    :func:`reward_problem` refuses (not finite, a person's outside [0, 1]) are not accepted.

    Human rewards come first while the group is open: a human reward replaces the judge's reward of the same
    rollout (and a later human reward of it replaces an earlier one); a judge reward of a rollout a person
    already rewarded is not accepted."""
    rollout = reward.envelope.rollout_id or ""
    known_ids = {e.event_id for e in state.rewards.values()}
    if state.closed or reward.event_id in known_ids or reward_problem(reward) is not None:
        return state, False
    previous = state.rewards.get(rollout)
    human = is_human(reward)
    if previous is not None and not (human and reward.status == R.RewardStatus.OK):
        return state, False
    entry = RewardEntry(
        event_id=reward.event_id,
        score=float(reward.score),
        usable=reward.status == R.RewardStatus.OK,
        adapter_name=reward.adapter_name,
        adapter_version=int(reward.adapter_version),
        human=human,
    )
    expected = max(state.expected, int(reward.group_size))
    demo = state.demo_source or reward.demo_source
    return replace(state, rewards={**state.rewards, rollout: entry}, expected=expected, demo_source=demo), True


def add_completed(state: GroupState, done: R.RolloutCompleted) -> GroupState:
    rollout = done.envelope.rollout_id or ""
    if rollout in state.turns_expected:
        return state
    expected = max(state.expected, int(done.group_size))
    return replace(state, turns_expected={**state.turns_expected, rollout: int(done.turns)}, expected=expected,
                   demo_source=state.demo_source or done.demo_source,
                   served=bool(state.served) or done.source.startswith(SERVED_SOURCE))


def wants_action(state: GroupState, rollout: str) -> bool:
    """Whether a planner action of ``rollout`` can still end up in a TrainingSample."""
    if rollout in state.emitted:
        return False
    return not state.closed or (state.trains and rollout in state.advantages)


def missing_rollouts(state: GroupState) -> list[str]:
    return [r for r in (ids.rollout_id(state.group_id, i) for i in range(state.expected)) if r not in state.rewards]


#: A control-arm predicate on a group's version (:func:`maybe_close`); the default: no group is.
Control = Callable[[int], bool]


def _never(_version: int) -> bool:
    return False


def _close(state: GroupState, status: R.GroupStatus, policy: WindowPolicy, now: float,
           control: Control) -> tuple[GroupState, R.GroupClosed]:
    usable = [(rid, e.score) for rid, e in state.rewards.items() if e.usable]
    versions = [e.adapter_version for e in state.rewards.values()]
    scores = [s for _, s in usable]
    trains, reason, advantages = False, "", {}
    mean = std = 0.0
    if scores:
        result = policy.estimator(scores)
        mean, std = result.mean, result.std
    if status == R.GroupStatus.TIMED_OUT and policy.partial_policy == "drop":
        reason = "timed_out_dropped"
    elif state.demo_source is not None:  # trained by likelihood when correct; the judge dead-lettered it otherwise
        trains = bool(scores) and all(s >= SUCCESS_THRESHOLD for s in scores)
        reason = DEMONSTRATION if trains else "demonstration_rejected"
        advantages = {rid: DEMONSTRATION_ADVANTAGE for rid, _ in usable} if trains else {}
    elif len(scores) < max(1, policy.min_group_size if status == R.GroupStatus.TIMED_OUT else 1):
        reason = "too_few_rewards"
    elif result.zero_variance:
        reason = "zero_variance"
    elif versions and control(versions[0]):
        reason = CONTROL_ARM  # served and judged for the A/B comparison; its samples would be stale
    else:
        trains = True
        reason = "complete" if status == R.GroupStatus.COMPLETE else "timed_out_scored"
        advantages = {rid: a for (rid, _), a in zip(usable, result.advantages, strict=True)}
    closed = R.GroupClosed(
        envelope=R.Envelope.new("streams", event_id=ids.group_closed_id(state.group_id),
                                task_id=state.task_id, group_id=state.group_id),
        status=status, expected=state.expected, received=len(state.rewards), reward_mean=mean,
        reward_std=std, estimator=policy.estimator_name, trains=trains, reason=reason,
        adapter_version=versions[0] if versions else 0, missing_rollout_ids=missing_rollouts(state),
        samples=len(advantages),
    )
    new = replace(state, closed=True, closed_at=now, trains=trains, advantages=advantages, mean=mean, std=std,
                  size=len(scores), estimator=policy.estimator_name)
    return new, closed


def maybe_close(state: GroupState, policy: WindowPolicy, now: float,
                control: Control = _never) -> tuple[GroupState, R.GroupClosed | None]:
    """Close the group if it is complete or timed out; otherwise return it unchanged and ``None``. ``control(v)``:
    whether a group served by version ``v`` is the A/B test's control arm for the comparison only, asked at close."""
    if state.closed:
        return state, None
    if state.expected > 0 and len(state.rewards) >= state.expected:
        hold = review_hold(policy, state.served, state.expected, state.demo_source)
        if hold > 0 and not reviewed(state):
            if state.complete_at is None:
                return replace(state, complete_at=now), None
            if not hold_over(state.complete_at, policy, now, hold):
                return state, None
        return _close(state, R.GroupStatus.COMPLETE, policy, now, control)
    if now - state.first_seen >= policy.timeout_s:
        return _close(state, R.GroupStatus.TIMED_OUT, policy, now, control)
    return state, None


def review_hold(policy: WindowPolicy, served: bool | None, expected: int, demo_source: str | None) -> float:
    """Seconds a complete group is held for review (see the module docstring): ``served_review_hold_s`` for a group
    served to a client (``served``), or for a group of one whose provenance is not known yet (``served`` None), but
    never for a demonstration (``label --as-demo`` of a served answer keeps its Task's source: an operator already
    judged it); ``review_hold_s`` for every group; the longer applies."""
    opened = demo_source is None and (bool(served) or (served is None and expected == 1))
    return max(policy.review_hold_s, policy.served_review_hold_s if opened else 0.0)


def hold_over(complete_at: float | None, policy: WindowPolicy, now: float, hold_s: float | None = None) -> bool:
    """Whether the review hold (``hold_s``, default ``policy.review_hold_s``: :func:`review_hold` gives a group's)
    of a group complete since ``complete_at`` has ended (False when none started)."""
    hold = policy.review_hold_s if hold_s is None else hold_s
    return complete_at is not None and hold > 0 and now - complete_at >= hold


def reviewed(state: GroupState) -> bool:
    """Every usable reward of the group is a person's: nothing left for a review hold to wait for."""
    usable = [e for e in state.rewards.values() if e.usable]
    return bool(usable) and all(e.human for e in usable)


def finished(state: GroupState) -> bool:
    """Closed and nothing more to emit (every trainable rollout's sample is out)."""
    return state.closed and all(r in state.emitted for r in state.advantages)


def expired(state: GroupState, now: float, ttl_s: float) -> bool:
    """A closed group kept longer than ``ttl_s``: forget it (and drop its unfinished actions)."""
    return state.closed and state.closed_at is not None and now - state.closed_at >= ttl_s
