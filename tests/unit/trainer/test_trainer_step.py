"""Optimisation step on the tiny in-process model: exact recompute, accumulation invariant, smoke."""

from __future__ import annotations

import pytest
import torch
from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.avro import records as R
from streamgrpo.trainer.batching import build_batch, micro_batches
from streamgrpo.trainer.losses import LossConfig, build_loss
from streamgrpo.trainer.model import ModelSpec, attach_lora, token_logprobs
from streamgrpo.trainer.schedules import build_scheduler
from streamgrpo.trainer.step import StepConfig, accumulate_gradients, build_optimizer, optimizer_step

SPEC = ModelSpec(base_model="unused", lora_rank=4, lora_alpha=8, device="cpu")


def policy(seed=0, random_b=True):
    base, tok = tiny_model(seed)
    model = attach_lora(base, SPEC)
    if random_b:  # a non-trivial adapter, so the policy differs from the reference
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    model.train()
    return model, tok


def samples(tok, n=6, seed=0):
    out = make_samples(tok, n, seed=seed)
    return [R.TrainingSample(**{**s.__dict__, "behaviour_version": i % 2}) for i, s in enumerate(out)]


def test_token_logprobs_are_log_softmax_of_tempered_logits_at_the_token():
    model, tok = policy()
    ids = torch.tensor([tok.encode("hello world", add_special_tokens=False)])
    mask = torch.ones_like(ids)
    got = token_logprobs(model, ids, mask, temperature=0.7)
    logits = model(input_ids=ids, attention_mask=mask).logits[0]
    t = 4
    expected = torch.log_softmax(logits[t - 1] / 0.7, dim=-1)[ids[0, t]]
    assert got.shape == ids.shape and got[0, 0].item() == 0.0
    assert got[0, t].item() == pytest.approx(expected.item(), abs=1e-5)


def test_action_only_logprobs_equal_the_full_logits_path_in_value_and_gradient():
    """``only=action_mask`` runs the output head on the action positions only; values, gradients and the
    adapter-disabled reference must be those of the full (B, T, V) path."""
    from streamgrpo.trainer.model import _decoder_and_head

    model, tok = policy()
    assert _decoder_and_head(model) is not None  # the fast path is really taken for this model
    batch = build_batch(samples(tok), max_seq_len=128, normalisation="rollout_mean", max_tokens=32)
    mask = batch.action_mask
    assert 0 < int(mask.sum()) < mask.numel() // 2  # prompts dominate, as in real samples
    params = [p for p in model.parameters() if p.requires_grad]

    def run(only):
        model.zero_grad()
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask, 0.8, only=only)
        (logp * mask * batch.advantages[:, None]).sum().backward()
        return logp.detach(), [p.grad.clone() for p in params]

    full, g_full = run(None)
    fast, g_fast = run(mask)
    assert torch.allclose(fast[mask], full[mask], atol=1e-5) and (fast[~mask] == 0).all()
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(g_fast, g_full, strict=True))
    assert any(float(g.abs().sum()) > 0 for g in g_fast)
    with torch.no_grad(), model.disable_adapter():
        ref_full = token_logprobs(model, batch.input_ids, batch.attention_mask, 0.8)
        ref_fast = token_logprobs(model, batch.input_ids, batch.attention_mask, 0.8, only=mask)
    assert torch.allclose(ref_fast[mask], ref_full[mask], atol=1e-5)
    assert not torch.allclose(ref_fast[mask], fast[mask], atol=1e-3)  # the adapter really was off


def test_models_with_logit_softcapping_take_the_full_logits_path():
    from streamgrpo.trainer.model import _decoder_and_head

    model, _ = policy()
    model.get_base_model().config.final_logit_softcapping = 30.0
    assert _decoder_and_head(model) is None


@pytest.mark.parametrize("loss_name", ["grpo", "gspo"])
def test_micro_batch_accumulation_equals_one_big_batch(loss_name):
    model, tok = policy()
    batch = build_batch(samples(tok), max_seq_len=128, normalisation="rollout_mean", max_tokens=32)
    cfg = StepConfig(loss=build_loss(loss_name), loss_config=LossConfig(kl_coef=0.05), share_prefix=False)
    params = [p for p in model.parameters() if p.requires_grad]

    model.zero_grad()
    whole = accumulate_gradients(model, [batch], cfg)
    g_whole = [p.grad.clone() for p in params]
    model.zero_grad()
    parts = micro_batches(batch, token_budget=64, share_prefix=False)
    assert len(parts) >= 3
    split = accumulate_gradients(model, parts, cfg)
    g_split = [p.grad.clone() for p in params]

    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-4, abs=1e-6)
    assert split["tokens"] == whole["tokens"]
    assert any(g.abs().sum() > 0 for g in g_whole)
    for a, b in zip(g_whole, g_split, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_reference_is_the_base_model_with_adapter_disabled():
    model, tok = policy()
    base, _ = tiny_model(0)
    ids = torch.tensor([tok.encode("abc def", add_special_tokens=False)])
    mask = torch.ones_like(ids)
    with torch.no_grad(), model.disable_adapter():
        ref = token_logprobs(model, ids, mask, 1.0)
        with_adapter_off = token_logprobs(base, ids, mask, 1.0)
        torch.testing.assert_close(ref, with_adapter_off)
    with torch.no_grad():
        assert not torch.allclose(token_logprobs(model, ids, mask, 1.0), ref)


def test_params_change_after_one_step_and_metrics_are_reported():
    model, tok = policy(random_b=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer(model, lr=1e-2)
    sched = build_scheduler(opt, "cosine", warmup_steps=1, total_steps=10, min_ratio=0.1)
    batch = build_batch(samples(tok), max_seq_len=128, normalisation="rollout_mean", max_tokens=32)
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig())
    m = optimizer_step(model, opt, sched, micro_batches(batch, 128), cfg)
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed and all("lora_" in n for n in changed)
    for key in ("loss", "pg_loss", "kl", "clip_frac", "mean_adv", "tokens", "grad_norm", "lr", "is_weight_mean",
                "tis_truncated_frac", "abs_log_ratio_v0", "abs_log_ratio_v1", "max_abs_log_ratio_v0",
                "max_abs_log_ratio_v1"):
        assert key in m
    assert m["tokens"] == float(batch.action_mask.sum())
    assert 0.0 <= m["clip_frac"] <= 1.0 and 0.0 <= m["tis_truncated_frac"] <= 1.0
    assert 0 < m["abs_log_ratio_v0"] <= m["max_abs_log_ratio_v0"]


@pytest.mark.parametrize("share_prefix", [False, True])
def test_each_row_is_recomputed_at_its_own_temperature(share_prefix):
    model, tok = policy()
    ids = torch.tensor([tok.encode("hello world", add_special_tokens=False)] * 2)
    mask = torch.ones_like(ids)
    only = torch.zeros_like(ids, dtype=torch.bool)
    only[:, 6:] = True
    got = token_logprobs(model, ids, mask, torch.tensor([0.5, 1.5]), only=only, share_prefix=share_prefix)
    with torch.no_grad():
        logits = model(input_ids=ids[:1], attention_mask=mask[:1]).logits[0]
    for row, temp in ((0, 0.5), (1, 1.5)):
        expected = torch.log_softmax(logits[:-1] / temp, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        torch.testing.assert_close(got[row, 6:], expected[5:], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got[0, 6:], got[1, 6:], atol=1e-3)
