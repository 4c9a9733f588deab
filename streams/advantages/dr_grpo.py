"""Dr. GRPO advantage (Liu et al., 2025): A_i = r_i - mean(r); no std normalisation (removes the
difficulty bias of dividing by a small std)."""

from __future__ import annotations

from collections.abc import Sequence

from streamgrpo.streams.advantages.base import GroupAdvantages, group_stats, is_zero_variance


def dr_grpo(rewards: Sequence[float]) -> GroupAdvantages:
    mean, std = group_stats(rewards)
    zero = is_zero_variance(rewards)
    adv = tuple(0.0 if zero else r - mean for r in rewards)
    return GroupAdvantages(adv, mean, std, len(rewards), zero)
