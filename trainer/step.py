"""One optimisation step on one optimizer batch -> metrics. No Kafka, no disk.

For each micro-batch: recompute the policy log-probs (``log_softmax(logits / T)`` with each row's
own sampling temperature, in the model's compute dtype, each shared prompt prefix once when
``share_prefix``), the reference log-probs with the adapter disabled (only when the KL term is on),
the loss (its weights are global, so micro-batch losses add up to the full-batch loss; the
off-policy correction is the loss config's), and backward. Then clip the gradient norm, step the
optimizer and the LR schedule.

Metrics: loss, pg_loss, kl, clip_frac, mean_adv (per rollout), tokens, grad_norm, lr, max_lora_b,
``is_weight_mean`` (mean importance weight applied per action token) and ``tis_truncated_frac``
(fraction of action tokens whose weight hit the cap), and per behaviour version ``v``:
``abs_log_ratio_v<v>`` / ``max_abs_log_ratio_v<v>``, the mean / max |trainer recomputation -
behaviour| log-prob of its action tokens: the sampler/trainer mismatch (engine numerics, e.g. a bf16
sampler) plus how far the policy moved since version ``v``.
Not covered: mixed-precision loss scaling (bf16 needs none), multi-device.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from streamgrpo.trainer.batching import Batch
from streamgrpo.trainer.losses import LossConfig, LossFn, LossInputs
from streamgrpo.trainer.model import token_logprobs


@dataclass(frozen=True)
class StepConfig:
    """What one step needs besides the model, optimizer and data."""

    loss: LossFn
    loss_config: LossConfig
    max_grad_norm: float | None = 1.0
    share_prefix: bool = True  #: compute each prompt prefix shared by several rows once (``trainer.prefix``)
    lr_scale: float = 1.0  #: this step's learning rate is the optimizer's times this (restored after the step)


def _logp(model: Any, mb: Batch, cfg: StepConfig) -> torch.Tensor:
    """(B, T): the policy's log-probs of the action tokens (0 elsewhere), each row at its temperature."""
    return token_logprobs(model, mb.input_ids, mb.attention_mask, mb.temperature, only=mb.action_mask,
                          share_prefix=cfg.share_prefix, grammar_bits=mb.grammar_bits)


def _reference_logp(model: Any, mb: Batch, cfg: StepConfig) -> torch.Tensor:
    """(B, T): log-probs under the base model (adapter disabled), no grad."""
    ctx = model.disable_adapter() if hasattr(model, "disable_adapter") else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        return _logp(model, mb, cfg)


def _to(mb: Batch, device: torch.device) -> Batch:
    return Batch(**{k: v.to(device) for k, v in mb.__dict__.items()})


def accumulate_gradients(model: Any, micro: Sequence[Batch], cfg: StepConfig) -> dict[str, float]:
    """Forward + backward over every micro-batch (gradients ADD UP); returns summed statistics."""
    device = next(model.parameters()).device
    sums: dict[str, float] = defaultdict(float)
    for mb in micro:
        mb = _to(mb, device)
        ref = _reference_logp(model, mb, cfg) if cfg.loss_config.kl_coef > 0 else None
        logp = _logp(model, mb, cfg)
        out = cfg.loss(LossInputs(logp, mb.behaviour_logp, mb.advantages, mb.action_mask,
                                  mb.token_weights, mb.row_weights, ref, prox_logp=logp.detach(), demo=mb.demo),
                       cfg.loss_config)
        out.loss.backward()
        for name in ("loss", "pg_loss", "kl", "clipped", "tokens", "is_weight", "truncated"):
            sums[name] += float(getattr(out, name).detach())
        _version_drift(logp.detach(), mb, sums)
    return dict(sums)


def _version_drift(logp: torch.Tensor, mb: Batch, sums: dict[str, float]) -> None:
    """Per behaviour version: sum, count and max of |recomputed - behaviour| over action tokens."""
    drift = (logp - mb.behaviour_logp).abs() * mb.action_mask
    for version in mb.behaviour_version.unique().tolist():
        rows = mb.behaviour_version == version
        sums[f"_drift_sum_v{version}"] += float(drift[rows].sum())
        sums[f"_drift_n_v{version}"] += float(mb.action_mask[rows].sum())
        key = f"_drift_max_v{version}"
        sums[key] = max(sums[key], float(drift[rows].max()))


def optimizer_step(model: Any, optimizer: torch.optim.Optimizer, scheduler: Any, micro: Sequence[Batch],
                   cfg: StepConfig) -> dict[str, float]:
    """One full step (accumulate, clip, update, schedule) -> metrics dict."""
    optimizer.zero_grad(set_to_none=True)
    sums = accumulate_gradients(model, micro, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.max_grad_norm is not None:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
    else:
        grad_norm = float(torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * cfg.lr_scale
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    for group, base in zip(optimizer.param_groups, base_lrs, strict=True):
        group["lr"] = base
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    metrics = summarise(sums, micro, grad_norm, lr)
    metrics["max_lora_b"] = max_lora_b(model)
    return metrics


def max_lora_b(model: Any) -> float:
    """Largest |entry| of the LoRA B matrices (0 at initialisation; a collapse alarm when it runs away)."""
    with torch.no_grad():
        values = [float(p.detach().abs().max()) for n, p in model.named_parameters() if "lora_B" in n and p.numel()]
    return max(values, default=0.0)


def summarise(sums: dict[str, float], micro: Sequence[Batch], grad_norm: float, lr: float) -> dict[str, float]:
    """Turn summed statistics into the metrics dict (pure)."""
    tokens = sums.get("tokens", 0.0)
    adv: dict[int, float] = {}
    demos: set[int] = set()
    for mb in micro:
        for r, a, d in zip(mb.rollout_index.tolist(), mb.advantages.tolist(), mb.demo.tolist(), strict=True):
            if d:
                demos.add(r)
            else:
                adv[r] = a
    metrics = {
        "loss": sums.get("loss", 0.0), "pg_loss": sums.get("pg_loss", 0.0), "kl": sums.get("kl", 0.0),
        "clip_frac": sums.get("clipped", 0.0) / tokens if tokens else 0.0, "tokens": tokens,
        "is_weight_mean": sums.get("is_weight", 0.0) / tokens if tokens else 0.0,
        "tis_truncated_frac": sums.get("truncated", 0.0) / tokens if tokens else 0.0,
        "mean_adv": sum(adv.values()) / len(adv) if adv else 0.0, "rollouts": float(len(adv)),
        "demonstrations": float(len(demos)),
        "grad_norm": grad_norm, "lr": lr,
    }
    for key, value in sums.items():
        if key.startswith("_drift_sum_v"):
            version = key.removeprefix("_drift_sum_v")
            n = sums[f"_drift_n_v{version}"]
            metrics[f"abs_log_ratio_v{version}"] = value / n if n else 0.0
            metrics[f"max_abs_log_ratio_v{version}"] = sums[f"_drift_max_v{version}"]
    return metrics


def build_optimizer(model: Any, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """AdamW over the trainable (LoRA) parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
