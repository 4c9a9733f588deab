"""Shared types of the losses: inputs, configuration, outputs.

Shapes: ``B`` rows (one row = one planner turn = prompt + action tokens), ``T`` padded length.
Per-token tensors are aligned with ``input_ids``: position ``t`` holds the log-probability of
token ``input_ids[b, t]`` given the tokens before it (so position 0 is never an action token).

What is covered: the data a loss sees. What is not: how the tensors are built (``batching``) or
how the model is run (``step``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class LossConfig:
    """Hyper-parameters shared by the losses."""

    eps_low: float = 0.2  #: ratio clipped below at 1 - eps_low
    eps_high: float = 0.2  #: ratio clipped above at 1 + eps_high (DAPO "clip-higher" when > eps_low)
    kl_coef: float = 0.0  #: weight of the KL(policy || reference) penalty; 0 disables it
    kl_estimator: str = "k3"  #: "k1", "k2" or "k3" (see :mod:`~streamgrpo.trainer.losses.kl`)
    correction: str = "tis"  #: "tis" or "behaviour" (see :mod:`~streamgrpo.trainer.losses.correction`)
    tis_cap: float = 2.0  #: C: importance weights above it are truncated to it (``tis`` only)
    #: weight of the RAFT term (``losses.raft``: maximum likelihood of the rollouts with a positive advantage)
    #: added to every step of a policy-gradient loss; 0 disables it
    raft_coef: float = 0.0


@dataclass(frozen=True)
class LossInputs:
    """Tensors one loss call needs (a whole batch or one micro-batch of it).

    logp:            (B, T) float, current policy log-prob of each token (grad flows through it)
    behaviour_logp:  (B, T) float, log-prob under the policy that sampled it (no grad)
    advantages:      (B,)   float, the trajectory advantage of each row's rollout
    action_mask:     (B, T) bool, True where the token is a trained action token
    token_weights:   (B, T) float, aggregation weight of each action token (0 elsewhere);
                     over a whole optimizer batch they sum to 1 (per-rollout first, then rollouts)
    row_weights:     (B,)   float, aggregation weight of each row for sequence-level losses;
                     over a whole optimizer batch they sum to 1
    ref_logp:        (B, T) float or None, reference-policy log-probs (no grad) for the KL term
    prox_logp:       (B, T) float or None, the trainer's recomputation of the policy before this step
                     (no grad); None: the value of ``logp`` (one optimizer update per batch)
    demo:            (B,)   bool or None, rows given by a demonstration: trained by likelihood
                     (:func:`demo_term`); their advantage is 0, so no policy-gradient term moves them
    """

    logp: Tensor
    behaviour_logp: Tensor
    advantages: Tensor
    action_mask: Tensor
    token_weights: Tensor
    row_weights: Tensor
    ref_logp: Tensor | None = None
    prox_logp: Tensor | None = None
    demo: Tensor | None = None


@dataclass(frozen=True)
class LossOutput:
    """Result of a loss call. ``loss`` is differentiable; the rest are detached statistics.

    loss:        ()  pg_loss + kl_coef * kl + raft_coef * raft + demo (weighted sums; add them over micro-batches)
    pg_loss:     ()  policy-gradient part
    kl:          ()  weighted KL estimate (0 when no reference is given)
    clipped:     ()  number of action tokens whose clipped branch is active (no gradient from them)
    tokens:      ()  number of action tokens
    is_weight:   ()  sum over action tokens of the importance weight applied (1 each without correction)
    truncated:   ()  number of action tokens whose importance weight was truncated to the cap
    """

    loss: Tensor
    pg_loss: Tensor
    kl: Tensor
    clipped: Tensor
    tokens: Tensor
    is_weight: Tensor
    truncated: Tensor


LossFn = Callable[[LossInputs, LossConfig], LossOutput]


def kl_term(inputs: LossInputs, cfg: LossConfig) -> Tensor:
    """Weighted KL(policy || reference) over action tokens; 0 when disabled or no reference. Shape ()."""
    from streamgrpo.trainer.losses.kl import build_kl_estimator

    if cfg.kl_coef == 0.0 or inputs.ref_logp is None:
        return inputs.logp.new_zeros(())
    per_token = build_kl_estimator(cfg.kl_estimator)(inputs.logp, inputs.ref_logp)  # (B, T)
    return (per_token * inputs.token_weights * inputs.action_mask).sum()


def raft_term(inputs: LossInputs) -> Tensor:
    """RAFT / rejection-sampling fine-tuning: the weighted negative log-likelihood of the action tokens of
    rows whose rollout has a positive advantage (with a correctness reward: the correct rollouts of a group
    that also had wrong ones). Shape (); the weights are the batch's token weights, so the term is an additive
    share over micro-batches like every other."""
    chosen = inputs.action_mask & (inputs.advantages > 0).unsqueeze(1)  # (B, T)
    return -(inputs.logp * inputs.token_weights * chosen).sum()


def demo_term(inputs: LossInputs) -> Tensor:
    """Behaviour cloning of demonstrations: the weighted negative log-likelihood of the action tokens of the rows a
    demonstration gave (``inputs.demo``), under the grammar-masked distribution the trainer recomputes. The same
    token weights as every term, so a step that mixes demonstrations and policy samples gives each sample its
    share. Shape (); 0 when no row is a demonstration's."""
    if inputs.demo is None:
        return inputs.logp.new_zeros(())
    chosen = inputs.action_mask & inputs.demo.unsqueeze(1)  # (B, T)
    return -(inputs.logp * inputs.token_weights * chosen).sum()


def old_and_weight(inputs: LossInputs, cfg: LossConfig) -> tuple[Tensor, Tensor]:
    """(B, T) each: the log-probs the ratio is taken against, and the UNCAPPED log importance weight
    (``losses.correction``; each loss caps it at token or sequence level)."""
    from streamgrpo.trainer.losses.correction import build_correction

    old, log_weight = build_correction(cfg.correction)(inputs.logp, inputs.prox_logp, inputs.behaviour_logp)
    zero = torch.zeros_like(log_weight)
    return old.detach(), torch.where(inputs.action_mask, log_weight, zero).detach()


def capped(log_weight: Tensor, cfg: LossConfig) -> tuple[Tensor, Tensor]:
    """Weights ``min(exp(log_weight), tis_cap)`` and where the cap applied (bool), same shape."""
    raw = torch.exp(log_weight)
    return raw.clamp(max=cfg.tis_cap), raw > cfg.tis_cap


def finish(pg_loss: Tensor, kl: Tensor, clipped: Tensor, inputs: LossInputs, cfg: LossConfig,
           weights: Tensor, truncated: Tensor) -> LossOutput:
    """Combine the parts into a :class:`LossOutput` (``weights``/``truncated``: per action token, (B, T))."""
    mask = inputs.action_mask
    loss = pg_loss + cfg.kl_coef * kl
    if cfg.raft_coef:
        loss = loss + cfg.raft_coef * raft_term(inputs)
    if inputs.demo is not None:
        loss = loss + demo_term(inputs)
    return LossOutput(
        loss=loss,
        pg_loss=pg_loss.detach(),
        kl=kl.detach(),
        clipped=clipped.detach().to(torch.float32),
        tokens=mask.sum().to(torch.float32),
        is_weight=(weights * mask).sum().detach().to(torch.float32),
        truncated=(truncated & mask).sum().to(torch.float32),
    )
