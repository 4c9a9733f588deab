"""RAFT: rejection-sampling fine-tuning on the policy's own successful rollouts (arXiv 2504.11343).

Per action token of a rollout with a positive advantage (with the default correctness reward: the correct
rollouts of a group that also had wrong ones): ``l = -logp``; other rows contribute nothing. The token
losses are aggregated with the batch's ``token_weights`` like the policy-gradient losses, so a step over
micro-batches is exact. No importance ratio and no clipping: it is maximum likelihood on selected
samples, which keeps learning from the few successes a small model finds without being pushed away from
the far more numerous failures. Use it as the trainer's objective (``[trainer] loss = "raft"``, e.g. as a
warm start, or ``replay train --objective raft`` over an archived range), or mix it into GRPO steps with
``[trainer] raft_coef``.

Not covered: choosing the samples (the stream's advantage window does: groups without variance are not
sent), demonstrations from another policy (they would arrive as ordinary samples with their provenance).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from streamgrpo.trainer.losses.base import LossConfig, LossInputs, LossOutput, finish, kl_term, raft_term


def loss(inputs: LossInputs, cfg: LossConfig) -> LossOutput:
    """Negative log-likelihood of the positive-advantage rows' action tokens; see the module docstring.
    Importance weights are 1 and nothing is clipped; a ``raft_coef`` is ignored (it would add the term twice)."""
    none = torch.zeros_like(inputs.action_mask)
    return finish(raft_term(inputs), kl_term(inputs, cfg), none.sum(), inputs, replace(cfg, raft_coef=0.0),
                  torch.ones_like(inputs.logp), none)
