"""Policy-gradient losses (one module per loss) and their registry.

Every loss is a pure function ``(LossInputs, LossConfig) -> LossOutput`` on tensors (see
:mod:`~streamgrpo.trainer.losses.base`). Aggregation is done with precomputed weights
(:mod:`~streamgrpo.trainer.losses.normalisation`), so a loss over a micro-batch is an additive
share of the loss over the whole optimizer batch (gradient accumulation is exact).

Adding a loss adds a module and one line in :data:`LOSSES`.
"""

from __future__ import annotations

from streamgrpo.trainer.losses import grpo, gspo, raft
from streamgrpo.trainer.losses.base import LossConfig, LossFn, LossInputs, LossOutput

#: loss name -> pure loss function.
LOSSES: dict[str, LossFn] = {
    "grpo": grpo.loss,
    "gspo": gspo.loss,
    "raft": raft.loss,
}


def build_loss(name: str) -> LossFn:
    """The loss function registered as ``name``; raises ``KeyError`` naming the choices."""
    try:
        return LOSSES[name]
    except KeyError:
        raise KeyError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}") from None


__all__ = ["LOSSES", "LossConfig", "LossFn", "LossInputs", "LossOutput", "build_loss"]
