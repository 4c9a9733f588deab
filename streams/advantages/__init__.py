"""Group-relative advantage estimators: one module per algorithm plus this registry.

``build_estimator(name)`` returns a pure function ``rewards -> GroupAdvantages`` for one group.
Adding an estimator = adding a module and one line in :data:`ESTIMATORS`.

Covered: GRPO ``(r-mean)/(std+eps)``, Dr.GRPO ``r-mean``, RLOO ``r_i - mean(others)``, zero-variance
detection. Not covered: per-turn normalisation (advantages are per trajectory, by design).
"""

from __future__ import annotations

from streamgrpo.streams.advantages.base import Estimator, GroupAdvantages, group_stats, is_zero_variance
from streamgrpo.streams.advantages.dr_grpo import dr_grpo
from streamgrpo.streams.advantages.grpo import grpo
from streamgrpo.streams.advantages.rloo import rloo
from streamgrpo.streams.errors import StreamsConfigError

ESTIMATORS: dict[str, Estimator] = {"grpo": grpo, "dr_grpo": dr_grpo, "rloo": rloo}


def build_estimator(name: str) -> Estimator:
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise StreamsConfigError(
            f"unknown advantage estimator {name!r}; choose one of {', '.join(sorted(ESTIMATORS))} "
            "(setting streams.estimator)"
        ) from None


__all__ = ["ESTIMATORS", "Estimator", "GroupAdvantages", "build_estimator", "group_stats", "is_zero_variance"]
