"""Collapse alarms: the per-version signs that a policy is learning the wrong thing, and the rule that
raises an alarm a user sees (the run's progress line and report).

It reads, per adapter version (the version that SERVED the rollout), the one per-version fold
:class:`~streamgrpo.lifecycle.stats.VersionStats`: rollouts, answered rollouts, tool calls, OK judge rewards
(mean and standard deviation), closed groups and the groups among them without reward variance (they train
nothing). The trainer's own signs travel in ``AdapterPublished.metrics`` and are read as they are:
``max_lora_b`` (largest |LoRA B| entry) and ``abs_log_ratio_v*`` (sampler-vs-trainer log-probability gap).

:func:`alarms` compares the EARLY versions (the oldest ones, together at least ``min_rollouts``
rollouts) with the RECENT ones (the newest ones, at least ``min_rollouts`` too) and warns when:

- the answered rate climbs (by ``answered_rise`` or more) while the mean reward falls: the planner learns to
  answer at once instead of answering right (the collapse docs/learning.md measured with a format credit);
- the tool calls per rollout fall by half or more while the reward does not rise: it drops its tools;
- the share of FULL groups without reward variance reaches ``flat_share`` and is higher than early on: the
  reward no longer separates the group's rollouts (all wrong or all right), so nothing is trained. Curriculum
  probe groups (a cold kind's groups of 2, flat by design until the kind has signal) are not counted: counted,
  they raised this alarm at the end of every default run while the full groups still trained.

Pure: no clock, no I/O. What is not covered: judging whether a rise in reward is real (held-out evaluation is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from streamgrpo.lifecycle.stats import VersionStats

#: Another name of :class:`~streamgrpo.lifecycle.stats.VersionStats` (the same class, not a second fold).
VersionHealth = VersionStats


@dataclass(frozen=True)
class AlarmRule:
    min_rollouts: int = 32
    answered_rise: float = 0.2
    tools_fall: float = 0.5
    flat_share: float = 0.8


def _pool(versions: Iterable[int], per_version: Mapping[int, VersionStats],
          min_rollouts: int) -> tuple[VersionStats, set[int]] | None:
    total, used = VersionStats(), set()
    for v in versions:
        total = total.merged(per_version[v])
        used.add(v)
        if total.rollouts >= min_rollouts:
            return total, used
    return None


def alarms(per_version: Mapping[int, VersionStats], rule: AlarmRule | None = None) -> list[str]:
    """The warnings of the module docstring, as sentences a user reads (empty: none, or too little data:
    the early and recent pools must not share a version)."""
    rule = rule or AlarmRule()
    versions = sorted(per_version)
    first = _pool(versions, per_version, rule.min_rollouts)
    last = _pool(reversed(versions), per_version, rule.min_rollouts)
    if first is None or last is None or max(first[1]) >= min(last[1]):
        return []
    early, recent = first[0], last[0]
    early_reward, recent_reward = early.reward_mean or 0.0, recent.reward_mean or 0.0
    out = []
    if recent.answered_rate - early.answered_rate >= rule.answered_rise and recent_reward < early_reward:
        out.append(f"answered rate up {early.answered_rate:.2f} -> {recent.answered_rate:.2f} while reward fell "
                   f"{early_reward:.2f} -> {recent_reward:.2f}: the planner is learning to answer, not to "
                   "answer right")
    if (early.tools_per_rollout > 0 and recent.tools_per_rollout <= early.tools_per_rollout * (1 - rule.tools_fall)
            and recent_reward <= early_reward):
        out.append(f"tool calls per rollout fell {early.tools_per_rollout:.2f} -> {recent.tools_per_rollout:.2f} "
                   "without a reward gain: the planner is dropping its tools")
    if (recent.full_groups and recent.full_flat_share >= rule.flat_share
            and recent.full_flat_share > early.full_flat_share):
        probes = f"; {recent.probe_groups} probe groups not counted" if recent.probe_groups else ""
        out.append(f"{recent.full_flat_share:.0%} of recent groups had no reward variance (early "
                   f"{early.full_flat_share:.0%}; reward std {recent.reward_std:.2f}{probes}): nothing left to train on")
    return out
