"""Collapse alarms: the per-version signs that a policy is learning the wrong thing, and the rule that
raises an alarm a user sees (the run's progress line and report).

Per adapter version (the version that SERVED the rollout) :class:`VersionHealth` counts: rollouts,
answered rollouts, tool calls, judge rewards (mean and standard deviation), closed groups and the groups
among them without reward variance (they train nothing). The trainer's own signs travel in
``AdapterPublished.metrics`` and are read as they are: ``max_lora_b`` (largest |LoRA B| entry) and
``abs_log_ratio_v*`` (sampler-vs-trainer log-probability gap).

:func:`alarms` compares the EARLY versions (the oldest ones, together at least ``min_rollouts``
rollouts) with the RECENT ones (the newest ones, at least ``min_rollouts`` too) and warns when:

- the answered rate climbs (by ``answered_rise`` or more) while the mean reward falls: the planner learns to
  answer at once instead of answering right (the collapse docs/learning.md measured with a format credit);
- the tool calls per rollout fall by half or more while the reward does not rise: it drops its tools;
- the share of groups without reward variance reaches ``flat_share`` and is higher than early on: the reward
  no longer separates the group's rollouts (all wrong or all right), so nothing is trained.

Pure: no clock, no I/O. What is not covered: judging whether a rise in reward is real (held-out evaluation is).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass
class VersionHealth:
    rollouts: int = 0
    answered: int = 0
    tool_calls: int = 0
    rewards: int = 0
    reward_sum: float = 0.0
    reward_sq: float = 0.0
    groups: int = 0
    flat_groups: int = 0

    def add_rollout(self, answered: bool, tool_calls: int) -> None:
        self.rollouts += 1
        self.answered += answered
        self.tool_calls += tool_calls

    def add_reward(self, score: float) -> None:
        self.rewards += 1
        self.reward_sum += score
        self.reward_sq += score * score

    def add_group(self, trains: bool) -> None:
        self.groups += 1
        self.flat_groups += not trains

    def merged(self, other: VersionHealth) -> VersionHealth:
        return VersionHealth(self.rollouts + other.rollouts, self.answered + other.answered,
                             self.tool_calls + other.tool_calls, self.rewards + other.rewards,
                             self.reward_sum + other.reward_sum, self.reward_sq + other.reward_sq,
                             self.groups + other.groups, self.flat_groups + other.flat_groups)

    @property
    def answered_rate(self) -> float:
        return self.answered / self.rollouts if self.rollouts else 0.0

    @property
    def tools_per_rollout(self) -> float:
        return self.tool_calls / self.rollouts if self.rollouts else 0.0

    @property
    def reward_mean(self) -> float:
        return self.reward_sum / self.rewards if self.rewards else 0.0

    @property
    def reward_std(self) -> float:
        if not self.rewards:
            return 0.0
        return math.sqrt(max(0.0, self.reward_sq / self.rewards - self.reward_mean ** 2))

    @property
    def flat_share(self) -> float:
        return self.flat_groups / self.groups if self.groups else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"rollouts": self.rollouts, "answered_rate": round(self.answered_rate, 4),
                "tools_per_rollout": round(self.tools_per_rollout, 3), "reward_mean": round(self.reward_mean, 4),
                "reward_std": round(self.reward_std, 4), "groups": self.groups,
                "zero_variance_share": round(self.flat_share, 4)}


@dataclass(frozen=True)
class AlarmRule:
    min_rollouts: int = 32
    answered_rise: float = 0.2
    tools_fall: float = 0.5
    flat_share: float = 0.8


def _pool(versions: Iterable[int], per_version: Mapping[int, VersionHealth],
          min_rollouts: int) -> tuple[VersionHealth, set[int]] | None:
    total, used = VersionHealth(), set()
    for v in versions:
        total = total.merged(per_version[v])
        used.add(v)
        if total.rollouts >= min_rollouts:
            return total, used
    return None


def alarms(per_version: Mapping[int, VersionHealth], rule: AlarmRule | None = None) -> list[str]:
    """The warnings of the module docstring, as sentences a user reads (empty: none, or too little data:
    the early and recent pools must not share a version)."""
    rule = rule or AlarmRule()
    versions = sorted(per_version)
    first = _pool(versions, per_version, rule.min_rollouts)
    last = _pool(reversed(versions), per_version, rule.min_rollouts)
    if first is None or last is None or max(first[1]) >= min(last[1]):
        return []
    early, recent = first[0], last[0]
    out = []
    if recent.answered_rate - early.answered_rate >= rule.answered_rise and recent.reward_mean < early.reward_mean:
        out.append(f"answered rate up {early.answered_rate:.2f} -> {recent.answered_rate:.2f} while reward fell "
                   f"{early.reward_mean:.2f} -> {recent.reward_mean:.2f}: the planner is learning to answer, not to "
                   "answer right")
    if (early.tools_per_rollout > 0 and recent.tools_per_rollout <= early.tools_per_rollout * (1 - rule.tools_fall)
            and recent.reward_mean <= early.reward_mean):
        out.append(f"tool calls per rollout fell {early.tools_per_rollout:.2f} -> {recent.tools_per_rollout:.2f} "
                   "without a reward gain: the planner is dropping its tools")
    if recent.groups and recent.flat_share >= rule.flat_share and recent.flat_share > early.flat_share:
        out.append(f"{recent.flat_share:.0%} of recent groups had no reward variance (early {early.flat_share:.0%}; "
                   f"reward std {recent.reward_std:.2f}): nothing left to train on")
    return out
