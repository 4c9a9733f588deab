"""GRPO advantage (DeepSeekMath): A_i = (r_i - mean(r)) / (std(r) + eps), std with ddof=0."""

from __future__ import annotations

from collections.abc import Sequence

from streamgrpo.streams.advantages.base import EPS, GroupAdvantages, group_stats, is_zero_variance


def grpo(rewards: Sequence[float], eps: float = EPS) -> GroupAdvantages:
    mean, std = group_stats(rewards)
    zero = is_zero_variance(rewards)
    adv = tuple(0.0 if zero else (r - mean) / (std + eps) for r in rewards)
    return GroupAdvantages(adv, mean, std, len(rewards), zero)
