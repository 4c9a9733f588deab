"""Demonstration samples in the trainer: likelihood of their action tokens, no policy-gradient term, never stale,
the warm-start learning rate; and the usual invariants (params change, micro-batches add up) with them in a batch."""

from __future__ import annotations

import pytest
import torch
from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.avro import records as R
from streamgrpo.trainer.batching import admit, build_batch, micro_batches
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.losses import LossConfig, build_loss
from streamgrpo.trainer.model import ModelSpec, attach_lora, token_logprobs
from streamgrpo.trainer.step import StepConfig, accumulate_gradients, build_optimizer, optimizer_step

SPEC = ModelSpec(base_model="unused", lora_rank=4, lora_alpha=8, device="cpu")


def policy(seed: int = 0):  # noqa: ANN201
    base, tok = tiny_model(seed)
    model = attach_lora(base, SPEC)
    model.train()
    return model, tok


def demos(samples: list[R.TrainingSample], every: int = 2) -> list[R.TrainingSample]:
    """Every ``every``-th sample turned into a demonstration's (advantage 1, logprobs 0: given tokens)."""
    out = []
    for i, s in enumerate(samples):
        if i % every == 0:
            turns = [R.SampleTurn(t.turn, t.prompt_token_ids, t.action_token_ids, [0.0] * len(t.action_token_ids))
                     for t in s.turns]
            s = R.TrainingSample(**{**s.__dict__, "turns": turns, "advantage": 1.0, "demo_source": "test"})
        out.append(s)
    return out


def test_demonstration_rows_carry_no_advantage_and_the_loss_is_their_likelihood() -> None:
    model, tok = policy()
    only = demos(make_samples(tok, 4, seed=1), every=1)
    batch = build_batch(only, max_seq_len=128, normalisation="rollout_mean", max_tokens=32)
    assert bool(batch.demo.all()) and float(batch.advantages.abs().sum()) == 0.0
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(), share_prefix=False)
    sums = accumulate_gradients(model, [batch], cfg)
    with torch.no_grad():
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.temperature)
    nll = -(logp * batch.token_weights * batch.action_mask).sum()
    assert sums["loss"] == pytest.approx(float(nll), rel=1e-5)  # exactly the weighted negative log-likelihood
    assert sums["pg_loss"] == pytest.approx(0.0, abs=1e-7)


def test_a_warm_start_step_raises_the_demonstrations_likelihood_and_counts_them() -> None:
    model, tok = policy()
    only = demos(make_samples(tok, 4, seed=2), every=1)
    batch = build_batch(only, max_seq_len=128, normalisation="rollout_mean", max_tokens=32)
    opt = build_optimizer(model, lr=1e-2)
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(), lr_scale=3.0)
    first = optimizer_step(model, opt, None, micro_batches(batch, 128), cfg)
    second = optimizer_step(model, opt, None, micro_batches(batch, 128), cfg)
    assert second["loss"] < first["loss"]
    assert first["demonstrations"] == 4.0 and first["rollouts"] == 0.0
    assert first["lr"] == pytest.approx(3e-2) and opt.param_groups[0]["lr"] == pytest.approx(1e-2)  # restored


@pytest.mark.parametrize("loss_name", ["grpo", "gspo", "raft"])
def test_micro_batches_add_up_with_demonstrations_in_the_batch(loss_name: str) -> None:
    model, tok = policy()
    mixed = demos(make_samples(tok, 6, seed=3))
    batch = build_batch(mixed, max_seq_len=128, normalisation="rollout_mean", max_tokens=32)
    assert 0 < int(batch.demo.sum()) < len(batch.demo)
    cfg = StepConfig(loss=build_loss(loss_name), loss_config=LossConfig(kl_coef=0.05), share_prefix=False)
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad()
    whole = accumulate_gradients(model, [batch], cfg)
    g_whole = [p.grad.clone() for p in params]
    model.zero_grad()
    parts = micro_batches(batch, token_budget=64, share_prefix=False)
    assert len(parts) >= 3
    split = accumulate_gradients(model, parts, cfg)
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-4, abs=1e-6)
    for a, b in zip(g_whole, [p.grad for p in params], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_demonstration_is_never_dropped_as_stale_but_a_policy_sample_is() -> None:
    _, tok = policy()
    old = [R.TrainingSample(**{**s.__dict__, "behaviour_version": 0}) for s in demos(make_samples(tok, 2, seed=4))]
    kept, dropped = admit(old, adapter_name="planner", current_version=9, max_staleness=1, max_seq_len=128)
    assert [s.demo_source for s in kept] == ["test"] and dropped == {"stale": 1}


def test_the_warm_start_learning_rate_applies_to_steps_of_mostly_demonstrations() -> None:
    cfg = TrainerConfig(lr=1e-4, demo_lr=3e-4)
    assert cfg.lr_scale(8, 8) == pytest.approx(3.0) and cfg.lr_scale(5, 8) == pytest.approx(3.0)
    assert cfg.lr_scale(4, 8) == 1.0 and cfg.lr_scale(0, 8) == 1.0 and cfg.lr_scale(0, 0) == 1.0
