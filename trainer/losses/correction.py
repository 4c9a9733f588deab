"""Off-policy correction: the policy the PPO ratio is taken against, and the importance weight that
corrects for the policy that really sampled (one function per correction + registry).

The behaviour logprobs come from the sampler: another process, up to ``max_staleness`` adapter
versions behind, and with its own numerics (a bf16 sampler differs from the trainer's recomputation
by ~0.03 mean, 0.15 max |delta logp| on SmolLM2, more than an optimizer step changes the policy).
``prox_logp`` is the trainer's own recomputation of the current policy before this step (detached;
when not given, the value of ``logp``: one optimizer update per batch, so they coincide).

- ``tis`` (default): decoupled PPO with truncated importance sampling. Ratio ``r = exp(logp - prox)``
  clipped as in PPO (a trust region in the trainer's own numerics), each term weighted by
  ``w = min(exp(prox - behaviour), C)`` (detached; C = ``tis_cap``). Its expectation over the
  sampler's tokens is the on-policy gradient wherever ``pi / mu <= C`` (the truncation bounds the
  variance; only tokens above C are biased, and counted). Sequence losses (GSPO) use the
  length-normalised weight ``min(exp(mean_t(prox - behaviour)), C)``, like their ratio.
- ``behaviour``: ratio against the behaviour logprobs, weight 1 (the estimator before: the IS ratio
  is inside the PPO clip, so a token whose engine mismatch exceeds the clip range gets no gradient).

With one update per batch ``r = 1`` at the forward, so under ``tis`` no token is clipped and the
gradient is ``-w * A * grad(logp)``; clipping acts only where several updates reuse one ``prox``.
Refs: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(TIS); Hilton et al. 2022 and AReaL (decoupled proximal policy). Not covered: per-sequence
rejection (masking instead of truncating), a lower cap.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

#: (logp, prox_logp or None, behaviour_logp) -> (old_logp the ratio is taken against, log IS weight), (B, T) each
Correction = Callable[[Tensor, Tensor | None, Tensor], tuple[Tensor, Tensor]]


def tis(logp: Tensor, prox_logp: Tensor | None, behaviour_logp: Tensor) -> tuple[Tensor, Tensor]:
    """Ratio against the trainer's recomputation; log weight ``prox - behaviour`` (capped by the loss)."""
    prox = (logp if prox_logp is None else prox_logp).detach()
    return prox, prox - behaviour_logp


def behaviour(logp: Tensor, prox_logp: Tensor | None, behaviour_logp: Tensor) -> tuple[Tensor, Tensor]:
    """Ratio against the behaviour logprobs; weight 1."""
    del prox_logp
    return behaviour_logp, torch.zeros_like(logp)


CORRECTIONS: dict[str, Correction] = {"tis": tis, "behaviour": behaviour}


def build_correction(name: str) -> Correction:
    """The correction registered as ``name``; raises ``KeyError`` naming the choices."""
    try:
        return CORRECTIONS[name]
    except KeyError:
        raise KeyError(f"unknown off-policy correction {name!r}; choose one of {sorted(CORRECTIONS)}") from None
