"""What one adapter version did while serving: the ONE per-version statistics type and its fold (pure).

:class:`VersionStats` holds every count any view of a version reads, and :meth:`VersionStats.add` folds one
event into it:

- ``RolloutCompleted``: rollouts, answered rollouts (status ANSWERED), tool calls;
- a judge ``Reward``: count (OK and ERROR), OK count, sum and sum of squares of the OK scores, successes
  (:func:`is_success`: OK and ``score >= success_threshold``; an ERROR reward is a failure), rollout errors
  (``rollout_status`` ERROR) and judge failures (an ERROR reward of a rollout that did not fail);
- a human ``Reward`` (provenance ``human:<name>``): counted APART, never in the judge figures;
- ``PlannerAction``: actions and parse failures (``ParseStatus.FAILED``);
- ``GroupClosed``: closed groups and those without reward variance (``trains`` false: they train nothing); a
  caller that knows a group was a curriculum probe (a cold kind's small group, ``metadata["probe"]`` on its
  requests; GroupClosed does not carry it) folds it with :meth:`VersionStats.add_group` ``probe=True``: counted
  in both figures and apart (``probe_groups``, ``probe_flat``), so :attr:`~VersionStats.full_flat_share` reads
  the full groups only;
- ``EvaluationCompleted``: the latest by event time.

Its readers: :class:`streamgrpo.models.stats.Stats` (per adapter name and version, for the registry, the
A/B test, ``adapters`` and ``status``), :class:`streamgrpo.cli.progress.Progress` (per version number, for the
progress line and the run report) and :func:`streamgrpo.lifecycle.health.alarms`.

A version's reward is the mean of its OK judge scores (:attr:`VersionStats.reward_mean`). Its success rate has
two denominators, both defined here: :attr:`~VersionStats.success_rate` per judge reward (an ERROR reward
fails; the registry and the A/B test) and :attr:`~VersionStats.ok_success_rate` per OK judge reward (the
progress line and the report).

What is not covered: deduplication and which events reach a version -- the caller's (``Stats`` drops a
rollout's second judge reward and rewards of finished groups; ``Progress`` feeds only OK judge rewards);
group outcomes (``outcomes``), which need state across rewards and are appended by ``Stats``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from streamgrpo.avro import provenance
from streamgrpo.avro import records as R

#: The summed counters (what :meth:`VersionStats.merged` adds up; outcomes and evaluation are not merged).
COUNTS = ("rewards", "ok", "reward_sum", "successes", "rollout_errors", "judge_failures", "human", "human_sum",
          "actions", "parse_failures", "rollouts", "answered", "tool_calls", "reward_sq", "groups_closed",
          "flat_groups", "probe_groups", "probe_flat")


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

    def add(self, event: R.Event, success_threshold: float = 0.5) -> None:
        """Fold one event (the module docstring lists what each type counts; other types are ignored)."""
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
            self.add_group(event.trains)
        elif isinstance(event, R.EvaluationCompleted):
            if self.evaluation is None or self.evaluation.envelope.event_time <= event.envelope.event_time:
                self.evaluation = event

    def add_rollout(self, answered: bool, tool_calls: int) -> None:
        self.rollouts += 1
        self.answered += answered
        self.tool_calls += tool_calls

    def add_reward(self, score: float, ok: bool = True, rollout_failed: bool = False,
                   success_threshold: float = 0.5) -> None:
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
    def ok_success_rate(self) -> float | None:
        """Successes per OK judge reward."""
        return self.successes / self.ok if self.ok else None

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
