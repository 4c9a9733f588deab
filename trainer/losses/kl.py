"""KL(policy || reference) estimators per token (Schulman, "Approximating KL divergence").

With ``log_r = ref_logp - logp`` for a token sampled from the policy:
- ``k1 = -log_r``                    unbiased, high variance, can be negative
- ``k2 = log_r ** 2 / 2``             biased, low variance, >= 0
- ``k3 = exp(log_r) - 1 - log_r``     unbiased, low variance, >= 0 (the GRPO paper's choice)

The reference policy is the base model with the LoRA adapter disabled (see ``step``).
Not covered: full-distribution KL (would need the whole vocabulary's logits).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

KlEstimator = Callable[[Tensor, Tensor], Tensor]


def k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """(B, T), (B, T) -> (B, T): ``logp - ref_logp``."""
    return logp - ref_logp


def k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """(B, T), (B, T) -> (B, T): ``(logp - ref_logp) ** 2 / 2``."""
    return 0.5 * (logp - ref_logp) ** 2


def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """(B, T), (B, T) -> (B, T): ``exp(ref - logp) - 1 - (ref - logp)``."""
    log_r = ref_logp - logp
    return torch.exp(log_r) - 1.0 - log_r


KL_ESTIMATORS: dict[str, KlEstimator] = {"k1": k1, "k2": k2, "k3": k3}


def build_kl_estimator(name: str) -> KlEstimator:
    """The estimator registered as ``name``; raises ``KeyError`` naming the choices."""
    try:
        return KL_ESTIMATORS[name]
    except KeyError:
        raise KeyError(f"unknown KL estimator {name!r}; choose one of {sorted(KL_ESTIMATORS)}") from None
