"""What one adapter version did while serving: the ONE per-version statistics type and its fold (pure).

:class:`VersionStats` holds every count any view of a version reads, and :meth:`VersionStats.add` folds one
event into it:

- ``RolloutCompleted``: rollouts, answered rollouts (status ANSWERED), tool calls;
- a judge ``Reward``: count (OK and ERROR), OK count, sum and sum of squares of the OK scores, successes
  (:func:`is_success`: OK and ``score >= success_threshold``; an ERROR reward is a failure), rollout errors
  (``rollout_status`` ERROR) and judge failures (an ERROR reward of a rollout that did not fail);
- a human ``Reward`` (provenance ``human:<name>``): counted APART, never in the judge figures;
- ``PlannerAction``: actions and parse failures (``ParseStatus.FAILED``);
- ``GroupClosed``: closed groups and those without reward variance (:func:`carries_signal` false: an A/B
  control-arm group that trained nothing, reason ``control_arm``, had variance and is not flat); a
  caller that knows a group was a curriculum probe (a cold kind's small group, ``metadata["probe"]`` on its
  requests; GroupClosed does not carry it) folds it with :meth:`VersionStats.add_group` ``probe=True``: counted
  in both figures and apart (``probe_groups``, ``probe_flat``), so :attr:`~VersionStats.full_flat_share` reads
  the full groups only;
- ``EvaluationCompleted``: the latest by event time;
- a demonstration's events (:func:`is_demonstration`): nothing (the demonstrator's facts, not the version's).

Its readers: :class:`Stats` below (per adapter name and version, for the registry, the A/B test,
``adapters`` and ``status``), :class:`streamgrpo.cli.progress.Progress` (per version number, for the progress
line and the run report) and :func:`streamgrpo.lifecycle.health.alarms`.

:class:`Stats` is the fold over the log (``apply(event)``) that keeps a :class:`VersionStats` per (adapter name,
version), as the ``AdapterState`` records on ``adapter-registry`` report them and the A/B controller tests them.
It adds the keying, the deduplication (by event id, and a rollout's second judge reward by rollout id, within
a bounded memory, :class:`~streamgrpo.topics.dedup.RecentIds`) and per-group outcomes for the A/B test
(:class:`Arm`): a group's outcome is its success share (successes / rollouts judged), final once every rollout
of the group has a judge reward (or when the group times out), stamped with the time of its last reward, so an
arm can be cut at a test's start (:meth:`Stats.arm`) whatever order the topics were read in.

A version's reward is the mean of its OK judge scores (:attr:`VersionStats.reward_mean`). Its success rate is
:attr:`~VersionStats.success_rate`, successes per judge reward (an ERROR reward fails), for every reader: the
registry, the A/B test, the progress line and the report.

What is not covered: by :class:`VersionStats` alone, deduplication and which events reach a version -- the
caller's (``Stats`` drops a rollout's second judge reward and rewards of finished groups) -- and group outcomes (``outcomes``), which need state across rewards and are appended by
``Stats``; by ``Stats``, windows in time (see ``reward-metrics``) and groups whose rewards come from several
versions (the fan-out never makes one; the first reward's version is used).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from streamgrpo.avro import provenance
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.pacing import CONTROL_ARM
from streamgrpo.topics.dedup import RecentIds

__all__ = ["COUNTS", "Arm", "Stats", "VersionStats", "carries_signal", "is_human", "is_success"]

#: The summed counters (what :meth:`VersionStats.merged` adds up; outcomes and evaluation are not merged).
COUNTS = ("rewards", "ok", "reward_sum", "successes", "rollout_errors", "judge_failures", "human", "human_sum",
          "actions", "parse_failures", "rollouts", "answered", "tool_calls", "reward_sq", "groups_closed",
          "flat_groups", "probe_groups", "probe_flat")


def carries_signal(closed: R.GroupClosed) -> bool:
    """Whether a closed group's usable rewards varied (it is not flat): it trains, or it is an A/B control-arm group
    judged for the comparison only (reason :data:`~streamgrpo.lifecycle.pacing.CONTROL_ARM`, no samples)."""
    return closed.trains or closed.reason == CONTROL_ARM


#: The default success threshold: a judge reward counts as a success when it is OK and ``score >=`` this. The one
#: home of the number: ``[streams] success_threshold`` defaults to it, and so do every fold and view below and in
#: ``cli`` that is not handed the configured value.
SUCCESS_THRESHOLD: float = 0.5


def is_success(ok: bool, score: float, success_threshold: float) -> bool:
    """Whether a judge reward counts as a success: OK and at least the threshold."""
    return ok and score >= success_threshold


@dataclass
class VersionStats:
    """What one adapter version did while serving (counts; rates are properties)."""

    rewards: int = 0  # judge rewards, OK and ERROR
    ok: int = 0
    reward_sum: float = 0.0  # of OK judge rewards
    successes: int = 0
    rollout_errors: int = 0
    judge_failures: int = 0
    human: int = 0
    human_sum: float = 0.0
    actions: int = 0
    parse_failures: int = 0
    outcomes: list[tuple[int, float]] = field(default_factory=list)  # (time of the group's last reward ms, outcome)
    evaluation: R.EvaluationCompleted | None = None
    rollouts: int = 0  # RolloutCompleted
    answered: int = 0
    tool_calls: int = 0
    reward_sq: float = 0.0  # of OK judge rewards
    groups_closed: int = 0  # GroupClosed
    flat_groups: int = 0  # closed groups without reward variance
    probe_groups: int = 0  # of groups_closed: curriculum probe groups (when the caller knows)
    probe_flat: int = 0  # of flat_groups: probe groups without reward variance

    def add(self, event: R.Event, success_threshold: float = SUCCESS_THRESHOLD) -> None:
        """Fold one event (the module docstring lists what each type counts; other types are ignored)."""
        if is_demonstration(event):
            return
        if isinstance(event, R.Reward):
            if provenance.is_human(event.judge.name):
                self.add_human(event.score)
            else:
                self.add_reward(event.score, event.status == R.RewardStatus.OK,
                                event.rollout_status == R.RolloutStatus.ERROR, success_threshold)
        elif isinstance(event, R.RolloutCompleted):
            self.add_rollout(event.status == R.RolloutStatus.ANSWERED, sum(event.tool_calls.values()))
        elif isinstance(event, R.PlannerAction):
            self.actions += 1
            self.parse_failures += event.parse_status == R.ParseStatus.FAILED
        elif isinstance(event, R.GroupClosed):
            self.add_group(carries_signal(event))
        elif isinstance(event, R.EvaluationCompleted):
            if self.evaluation is None or self.evaluation.envelope.event_time <= event.envelope.event_time:
                self.evaluation = event

    def add_rollout(self, answered: bool, tool_calls: int) -> None:
        self.rollouts += 1
        self.answered += answered
        self.tool_calls += tool_calls

    def add_reward(self, score: float, ok: bool = True, rollout_failed: bool = False,
                   success_threshold: float = SUCCESS_THRESHOLD) -> None:
        """One judge reward (``rollout_failed``: the rollout itself ended in ERROR)."""
        self.rewards += 1
        self.ok += ok
        self.reward_sum += score if ok else 0.0
        self.reward_sq += score * score if ok else 0.0
        self.successes += is_success(ok, score, success_threshold)
        self.rollout_errors += rollout_failed
        self.judge_failures += (not ok) and not rollout_failed

    def add_human(self, score: float) -> None:
        self.human += 1
        self.human_sum += score

    def add_group(self, trains: bool, probe: bool = False) -> None:
        self.groups_closed += 1
        self.flat_groups += not trains
        self.probe_groups += probe
        self.probe_flat += probe and not trains

    def merged(self, other: VersionStats) -> VersionStats:
        """The counters of both added up (outcomes and evaluation are not merged)."""
        return VersionStats(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                               for f in fields(self) if f.name in COUNTS})

    @property
    def groups(self) -> int:
        """Groups with a final outcome (every rollout judged, or timed out): the A/B test's sample size."""
        return len(self.outcomes)

    @property
    def reward_mean(self) -> float | None:
        return self.reward_sum / self.ok if self.ok else None

    @property
    def reward_std(self) -> float:
        if not self.ok:
            return 0.0
        return math.sqrt(max(0.0, self.reward_sq / self.ok - (self.reward_sum / self.ok) ** 2))

    @property
    def success_rate(self) -> float | None:
        """Successes per judge reward (an ERROR reward is a failure)."""
        return self.successes / self.rewards if self.rewards else None

    @property
    def human_mean(self) -> float | None:
        return self.human_sum / self.human if self.human else None

    @property
    def answered_rate(self) -> float:
        return self.answered / self.rollouts if self.rollouts else 0.0

    @property
    def tools_per_rollout(self) -> float:
        return self.tool_calls / self.rollouts if self.rollouts else 0.0

    @property
    def flat_share(self) -> float:
        """Share of the closed groups without reward variance."""
        return self.flat_groups / self.groups_closed if self.groups_closed else 0.0

    @property
    def full_groups(self) -> int:
        """Closed groups that were not curriculum probes."""
        return self.groups_closed - self.probe_groups

    @property
    def full_flat_share(self) -> float:
        """Share of the closed full groups (probes not counted) without reward variance."""
        return (self.flat_groups - self.probe_flat) / self.full_groups if self.full_groups else 0.0

    def rate(self, what: str) -> float:
        """``rollout_errors`` / ``judge_failures`` per judge reward, ``parse_failures`` per planner action."""
        denominator = self.actions if what == "parse_failures" else self.rewards
        return getattr(self, what) / denominator if denominator else 0.0

    def as_dict(self) -> dict[str, float]:
        """The collapse-health figures the run report lists per version (``health.per_version``)."""
        return {"rollouts": self.rollouts, "answered_rate": round(self.answered_rate, 4),
                "tools_per_rollout": round(self.tools_per_rollout, 3), "reward_mean": round(self.reward_mean or 0.0, 4),
                "reward_std": round(self.reward_std, 4), "groups": self.groups_closed,
                "zero_variance_share": round(self.flat_share, 4), "probe_groups": self.probe_groups,
                "full_zero_variance_share": round(self.full_flat_share, 4)}


def is_demonstration(event: R.Event) -> bool:
    """A demonstration's fact (a Task or RolloutRequest with a ``demonstration``, an event with ``demo_source`` set,
    its group's ``GroupClosed`` reason ``demonstration*``, a ``demonstration_*`` dead letter): what the demonstrator
    did, not what a version did -- never in a version's figures, the A/B test or the alarms."""
    if isinstance(event, R.GroupClosed):
        return event.reason.startswith("demonstration")
    if isinstance(event, R.DeadLetter):
        return event.reason_code.startswith("demonstration_")
    return getattr(event, "demonstration", None) is not None or getattr(event, "demo_source", None) is not None


def is_human(reward: R.Reward) -> bool:
    """A person's reward (``streamgrpo label``), not a judge's."""
    return provenance.is_human(reward.judge.name)


@dataclass(frozen=True)
class Arm:
    """Per-group outcomes of one arm of an A/B test: count, sum, sum of squares."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    @classmethod
    def of(cls, outcomes: Iterable[float]) -> Arm:
        xs = list(outcomes)
        return cls(len(xs), math.fsum(xs), math.fsum(x * x for x in xs))

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    def add(self, x: float) -> Arm:
        return Arm(self.n + 1, self.total + x, self.total_sq + x * x)


@dataclass
class _OpenGroup:
    adapter_name: str
    version: int
    expected: int
    rollouts: set[str] = field(default_factory=set)
    successes: int = 0
    last_ms: int = 0


class Stats:
    """The fold (``apply(event)``; events of other types are ignored)."""

    def __init__(self, success_threshold: float = SUCCESS_THRESHOLD, max_open_groups: int = 100_000) -> None:
        self.success_threshold = success_threshold
        self.max_open_groups = max_open_groups
        self.versions: dict[tuple[str, int], VersionStats] = {}
        self.open: dict[str, _OpenGroup] = {}
        self._finished = RecentIds(100_000)
        self._seen = RecentIds(100_000)

    def of(self, adapter_name: str, version: int) -> VersionStats:
        """The statistics of one version (empty when it never served)."""
        return self.versions.get((adapter_name, version)) or VersionStats()

    def _at(self, adapter_name: str, version: int) -> VersionStats:
        return self.versions.setdefault((adapter_name, version), VersionStats())

    def apply(self, event: R.Event) -> None:
        if is_demonstration(event):
            return
        if isinstance(event, (R.Reward, R.PlannerAction, R.EvaluationCompleted, R.GroupClosed)):
            if self._seen.seen(event.event_id):
                return
        if isinstance(event, R.Reward):
            self._reward(event)
        elif isinstance(event, (R.PlannerAction, R.EvaluationCompleted)):
            self._at(event.adapter_name, event.adapter_version).add(event, self.success_threshold)
        elif isinstance(event, R.GroupClosed) and event.status == R.GroupStatus.TIMED_OUT:
            group = self.open.get(event.envelope.group_id or "")
            if group is not None and group.rollouts:
                self._finish(event.envelope.group_id or "", group)

    def _reward(self, reward: R.Reward) -> None:
        s = self._at(reward.adapter_name, reward.adapter_version)
        if is_human(reward):
            s.add(reward)
            return
        gid, rid = reward.envelope.group_id or "", reward.envelope.rollout_id or reward.event_id
        if gid in self._finished:
            return
        group = self.open.get(gid)
        if group is None:
            group = self.open[gid] = _OpenGroup(reward.adapter_name, reward.adapter_version, max(1, reward.group_size))
            while len(self.open) > self.max_open_groups:
                self.open.pop(next(iter(self.open)))
        if rid in group.rollouts:
            return
        s.add(reward, self.success_threshold)
        group.rollouts.add(rid)
        group.successes += is_success(reward.status == R.RewardStatus.OK, reward.score, self.success_threshold)
        group.last_ms = max(group.last_ms, int(reward.envelope.event_time.timestamp() * 1000))
        if len(group.rollouts) >= group.expected:
            self._finish(gid, group)

    def _finish(self, gid: str, group: _OpenGroup) -> None:
        self.open.pop(gid, None)
        self._finished.add(gid)
        outcome = group.successes / len(group.rollouts)
        self._at(group.adapter_name, group.version).outcomes.append((group.last_ms, outcome))

    def arm(self, adapter_name: str, versions: Iterable[int], since_ms: int) -> Arm:
        """The outcomes of the groups ``versions`` served that finished at or after ``since_ms``."""
        return Arm.of(x for v in versions for t, x in self.of(adapter_name, v).outcomes if t >= since_ms)

    def pooled(self, adapter_name: str, versions: Iterable[int]) -> VersionStats:
        """Counts of several versions added up (their outcomes and evaluation are not merged)."""
        out = VersionStats()
        for v in versions:
            out = out.merged(self.of(adapter_name, v))
        return out
