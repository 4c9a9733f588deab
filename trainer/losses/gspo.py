"""GSPO: sequence-level, length-normalised importance ratio, clipped per sequence.

A sequence is one row (one planner turn's action). Per row:
``s = exp(mean_t(logp - behaviour_logp))`` over its action tokens,
``l = -min(s * A, clip(s, 1 - eps_low, 1 + eps_high) * A)``; rows are aggregated with
``row_weights`` (per rollout first over its turns, then over rollouts). GSPO's ratios are much
closer to 1 than token ratios, so its paper uses far smaller eps (e.g. 3e-4 / 4e-4).

``clipped`` counts the action tokens of rows whose clipped branch is active.
Not covered: GSPO-token (per-token advantages); here every token of a row shares one advantage.
"""

from __future__ import annotations

import torch

from streamgrpo.trainer.losses.base import LossConfig, LossInputs, LossOutput, finish, kl_term


def sequence_log_ratio(logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T), (B, T), (B, T) bool -> (B,): mean over action tokens of ``logp - behaviour_logp`` (0 if none)."""
    diff = torch.where(mask, logp - behaviour_logp, torch.zeros_like(logp))
    count = mask.sum(dim=1).clamp(min=1)
    return diff.sum(dim=1) / count


def loss(inputs: LossInputs, cfg: LossConfig) -> LossOutput:
    """Sequence-level clipped surrogate; see the module docstring. Returns scalar tensors."""
    mask = inputs.action_mask
    ratio = torch.exp(sequence_log_ratio(inputs.logp, inputs.behaviour_logp, mask))  # (B,)
    adv = inputs.advantages
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * adv
    per_row = -torch.minimum(unclipped, clipped)  # (B,)
    has_tokens = mask.any(dim=1)
    pg_loss = (per_row * inputs.row_weights * has_tokens).sum()
    row_clipped = (clipped < unclipped) & has_tokens
    return finish(pg_loss, kl_term(inputs, cfg), (row_clipped.unsqueeze(1) & mask).sum(), inputs, cfg)
