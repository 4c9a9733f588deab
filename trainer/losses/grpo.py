"""GRPO: token-level PPO-clip with an off-policy correction.

Per action token: ``r = exp(logp - old)``, ``l = -w * min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)``
where ``old`` and the importance weight ``w`` come from the correction (``losses.correction``:
``tis``: old = the trainer's recomputation, ``w = min(exp(old - behaviour), C)``; ``behaviour``:
old = the behaviour logprobs, ``w = 1``); the token losses are aggregated with
``token_weights`` (per rollout first, then over rollouts; per-rollout token mean, or Dr.GRPO's
constant-length normalisation, chosen in ``normalisation``). Positive advantages are clipped above
``1 + eps_high``, negative ones below ``1 - eps_low``.

Not covered: dual-clip, entropy bonus, the value function (there is none in GRPO).
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


def loss(inputs: LossInputs, cfg: LossConfig) -> LossOutput:
    """Token-level clipped surrogate; see the module docstring. Returns scalar tensors."""
    mask = inputs.action_mask
    old, log_weight = old_and_weight(inputs, cfg)  # (B, T) each, no grad
    weight, truncated = capped(log_weight, cfg)
    log_ratio = torch.where(mask, inputs.logp - old, torch.zeros_like(inputs.logp))  # (B, T)
    ratio = torch.exp(log_ratio)
    adv = inputs.advantages.unsqueeze(1)  # (B, 1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * adv
    per_token = -weight * torch.minimum(unclipped, clipped)  # (B, T)
    pg_loss = (per_token * inputs.token_weights * mask).sum()
    is_clipped = (clipped < unclipped) & mask
    return finish(pg_loss, kl_term(inputs, cfg), is_clipped.sum(), inputs, cfg, weight, truncated)
