"""RLOO advantage (Ahmadian et al., 2024): A_i = r_i - mean_{j != i} r_j (leave-one-out baseline).

Equivalently ``n/(n-1) * (r_i - mean(r))``. A group of one has no baseline: its advantage is 0.0
and it is reported as zero-variance (no signal).
"""

from __future__ import annotations

from collections.abc import Sequence

from streamgrpo.streams.advantages.base import GroupAdvantages, group_stats, is_zero_variance


def rloo(rewards: Sequence[float]) -> GroupAdvantages:
    mean, std = group_stats(rewards)
    n = len(rewards)
    zero = n < 2 or is_zero_variance(rewards)
    if zero:
        return GroupAdvantages(tuple(0.0 for _ in rewards), mean, std, n, True)
    total = sum(rewards)
    adv = tuple(r - (total - r) / (n - 1) for r in rewards)
    return GroupAdvantages(adv, mean, std, n, False)
