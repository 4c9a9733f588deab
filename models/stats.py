"""Live statistics of every adapter version: the second fold beside the lifecycle (no I/O, no clock).

:class:`Stats` folds ``rewards``, ``planner-actions``, ``groups`` and ``evaluations`` into a
:class:`~streamgrpo.lifecycle.stats.VersionStats` per (adapter name, version) -- what the
``AdapterState`` records on ``adapter-registry`` report and what the A/B controller tests. What each
event counts is :meth:`VersionStats.add <streamgrpo.lifecycle.stats.VersionStats.add>` (the one
definition of a version's reward and success); this fold adds the keying, the deduplication and:

- human rewards (provenance ``human:<name>``, see :func:`is_human`) are counted APART and never
  enter the judge figures or the A/B test;
- per-group outcomes for the A/B test: a group's outcome is its success share (successes / rollouts
  judged), final once every rollout of the group has a judge reward (or when the group times out),
  stamped with the time of its last reward, so an arm can be cut at a test's start
  (:meth:`Stats.arm`) whatever order the topics were read in;
- the latest held-out evaluation (EvaluationCompleted) by event time.

Duplicates are dropped by event id (and a rollout's second judge reward by rollout id), within a
bounded memory (:class:`~streamgrpo.topics.dedup.RecentIds`).
What is not covered: windows in time (see ``reward-metrics``), groups whose rewards come from
several versions (the fan-out never makes one; the first reward's version is used).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from streamgrpo.avro import provenance
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.stats import VersionStats, is_success
from streamgrpo.topics.dedup import RecentIds

__all__ = ["Arm", "Stats", "VersionStats", "is_human"]  # VersionStats lives in lifecycle.stats


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

    def __init__(self, success_threshold: float = 0.5, max_open_groups: int = 100_000) -> None:
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
