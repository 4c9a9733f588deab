"""GSPO: sequence-level, length-normalised importance ratio, clipped per sequence.

A sequence is one row (one planner turn's action). Per row:
``s = exp(mean_t(logp - old))`` over its action tokens,
``l = -w * min(s * A, clip(s, 1 - eps_low, 1 + eps_high) * A)``, with ``old`` and the row weight
``w = min(exp(mean_t(log IS weight)), C)`` from the correction (``losses.correction``; ``w = 1`` and
``old = behaviour`` under ``behaviour``); rows are aggregated with
``row_weights`` (per rollout first over its turns, then over rollouts). GSPO's ratios are much
closer to 1 than token ratios, so its paper uses far smaller eps (e.g. 3e-4 / 4e-4).

``clipped`` counts the action tokens of rows whose clipped branch is active.
Not covered: GSPO-token (per-token advantages); here every token of a row shares one advantage.
"""

from __future__ import annotations

import torch

from streamgrpo.trainer.losses.base import (
    LossConfig,
    LossInputs,
    LossOutput,
    capped,
    finish,
    kl_term,
    old_and_weight,
)


def sequence_log_ratio(logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T), (B, T), (B, T) bool -> (B,): mean over action tokens of ``logp - behaviour_logp`` (0 if none)."""
    diff = torch.where(mask, logp - behaviour_logp, torch.zeros_like(logp))
    count = mask.sum(dim=1).clamp(min=1)
    return diff.sum(dim=1) / count


def loss(inputs: LossInputs, cfg: LossConfig) -> LossOutput:
    """Sequence-level clipped surrogate; see the module docstring. Returns scalar tensors."""
    mask = inputs.action_mask
    old, log_weight = old_and_weight(inputs, cfg)  # (B, T) each, no grad
    weight, truncated = capped(sequence_log_ratio(log_weight, torch.zeros_like(log_weight), mask), cfg)  # (B,)
    ratio = torch.exp(sequence_log_ratio(inputs.logp, old, mask))  # (B,)
    adv = inputs.advantages
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * adv
    per_row = -weight * torch.minimum(unclipped, clipped)  # (B,)
    has_tokens = mask.any(dim=1)
    pg_loss = (per_row * inputs.row_weights * has_tokens).sum()
    row_clipped = (clipped < unclipped) & has_tokens
    tokens_shape = torch.ones_like(mask, dtype=weight.dtype)
    return finish(pg_loss, kl_term(inputs, cfg), (row_clipped.unsqueeze(1) & mask).sum(), inputs, cfg,
                  weight.unsqueeze(1) * tokens_shape, truncated.unsqueeze(1) & mask)
