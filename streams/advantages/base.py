"""Shared types of the advantage estimators (pure, no I/O).

An estimator maps the rewards of ONE group (one reward per trajectory) to one advantage per
trajectory, in the same order. Advantages are per trajectory: the caller gives the same value to
every planner turn of that trajectory (Flow-GRPO). Nothing here normalises over turns, so a 1-turn
and a 5-turn rollout with equal rewards get equal advantages.

What is not covered: token-level or turn-level credit assignment, reward shaping.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Default epsilon added to the standard deviation by normalising estimators.
EPS = 1e-6
#: Groups whose rewards differ by less than this have zero variance (no learning signal).
ZERO_VARIANCE_TOL = 1e-9


@dataclass(frozen=True)
class GroupAdvantages:
    """Result of one estimator on one group.

    ``advantages[i]`` belongs to ``rewards[i]``. ``zero_variance`` is True when every reward is
    equal (all advantages are then 0.0 and the group carries no signal: callers should not train on it).
    """

    advantages: tuple[float, ...]
    mean: float
    std: float
    size: int
    zero_variance: bool


def group_stats(rewards: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (ddof=0) of a non-empty group."""
    if not rewards:
        raise ValueError("a group needs at least one reward")
    if any(not math.isfinite(r) for r in rewards):
        raise ValueError(f"rewards must be finite numbers, got {list(rewards)}")
    mean = sum(rewards) / len(rewards)
    var = sum((r - mean) ** 2 for r in rewards) / len(rewards)
    return mean, math.sqrt(var)


def is_zero_variance(rewards: Sequence[float], tol: float = ZERO_VARIANCE_TOL) -> bool:
    return max(rewards) - min(rewards) <= tol


Estimator = Callable[[Sequence[float]], GroupAdvantages]
