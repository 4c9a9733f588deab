"""Aggregation weights: per rollout FIRST, then the mean over rollouts (Flow-GRPO).

A trajectory's advantage applies to every planner turn; its loss is averaged over its own
turns/tokens before the mean over rollouts, so a long trajectory does not outweigh a short one.
Weights are computed once over the WHOLE optimizer batch, so any split into micro-batches gives
additive shares of the same loss (exact gradient accumulation).

Token normalisations (registry :data:`TOKEN_NORMALISATIONS`):
- ``rollout_mean``: token weight = 1 / (action tokens of its rollout) / rollouts
- ``dr_grpo``: token weight = 1 / max_tokens / rollouts (sum over tokens divided by a constant,
  Dr.GRPO: no per-sequence length bias)
Row weights (sequence-level losses): 1 / (rows of its rollout) / rollouts.

Not covered: group-level normalisation (the advantage already carries the group statistics).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

TokenNormalisation = Callable[[Tensor, Tensor, int, int], Tensor]


def _per_rollout_count(values: Tensor, rollout_index: Tensor, n_rollouts: int) -> Tensor:
    """(B,) float, (B,) long -> (R,): sum of ``values`` per rollout."""
    out = torch.zeros(n_rollouts, dtype=values.dtype)
    return out.index_add(0, rollout_index, values)


def rollout_mean(action_mask: Tensor, rollout_index: Tensor, n_rollouts: int, max_tokens: int) -> Tensor:
    """(B, T) bool, (B,) long -> (B, T) float: per-rollout token mean, then mean over rollouts."""
    del max_tokens
    tokens = _per_rollout_count(action_mask.sum(dim=1).to(torch.float64), rollout_index, n_rollouts)  # (R,)
    per_row = 1.0 / (tokens[rollout_index].clamp(min=1.0) * n_rollouts)  # (B,)
    return (action_mask.to(torch.float64) * per_row.unsqueeze(1)).to(torch.float32)


def dr_grpo(action_mask: Tensor, rollout_index: Tensor, n_rollouts: int, max_tokens: int) -> Tensor:
    """(B, T) bool, (B,) long -> (B, T) float: per-rollout token SUM / max_tokens, then mean over rollouts."""
    del rollout_index
    if max_tokens < 1:
        raise ValueError("dr_grpo normalisation needs max_tokens >= 1")
    return action_mask.to(torch.float32) / float(max_tokens * n_rollouts)


TOKEN_NORMALISATIONS: dict[str, TokenNormalisation] = {"rollout_mean": rollout_mean, "dr_grpo": dr_grpo}


def build_normalisation(name: str) -> TokenNormalisation:
    """The token normalisation registered as ``name``; raises ``KeyError`` naming the choices."""
    try:
        return TOKEN_NORMALISATIONS[name]
    except KeyError:
        raise KeyError(f"unknown normalisation {name!r}; choose one of {sorted(TOKEN_NORMALISATIONS)}") from None


def row_weights(rollout_index: Tensor, n_rollouts: int) -> Tensor:
    """(B,) long -> (B,) float: 1 / (rows of its rollout) / rollouts."""
    rows = _per_rollout_count(torch.ones_like(rollout_index, dtype=torch.float64), rollout_index, n_rollouts)
    return (1.0 / (rows[rollout_index] * n_rollouts)).to(torch.float32)
