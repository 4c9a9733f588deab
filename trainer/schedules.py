"""Learning-rate schedules (registry): multiplier of the base LR as a function of the step.

- ``constant``: linear warmup over ``warmup_steps``, then 1.
- ``linear``: warmup, then linear decay to ``min_ratio`` at ``total_steps``.
- ``cosine``: warmup, then cosine decay to ``min_ratio`` at ``total_steps``.
Past ``total_steps`` the decaying schedules stay at ``min_ratio``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

Schedule = Callable[[int], float]


def _warmup(step: int, warmup_steps: int) -> float | None:
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    return None


def constant(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    w = _warmup(step, warmup_steps)
    return 1.0 if w is None else w


def linear(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    w = _warmup(step, warmup_steps)
    if w is not None:
        return w
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - (1.0 - min_ratio) * progress


def cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    w = _warmup(step, warmup_steps)
    if w is not None:
        return w
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


SCHEDULES: dict[str, Callable[..., float]] = {"constant": constant, "linear": linear, "cosine": cosine}


def build_scheduler(
    optimizer: torch.optim.Optimizer, name: str, *, warmup_steps: int, total_steps: int, min_ratio: float
) -> Any:
    """A ``LambdaLR`` for schedule ``name``; raises ``KeyError`` naming the choices."""
    try:
        fn = SCHEDULES[name]
    except KeyError:
        raise KeyError(f"unknown lr schedule {name!r}; choose one of {sorted(SCHEDULES)}") from None
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, partial(fn, warmup_steps=warmup_steps, total_steps=total_steps, min_ratio=min_ratio)
    )
