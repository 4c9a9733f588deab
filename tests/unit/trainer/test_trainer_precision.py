"""bf16 training: detection, which weights are cast, fp32 master weights and optimizer state, and the
same loss and gradient as fp32 within the stated tolerance."""

from __future__ import annotations

import copy

import pytest
import torch
from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.trainer import precision as P
from streamgrpo.trainer.batching import build_batch, micro_batches
from streamgrpo.trainer.errors import ModelConfigError
from streamgrpo.trainer.losses import LossConfig, build_loss
from streamgrpo.trainer.model import ModelSpec, attach_lora, load_policy, token_logprobs
from streamgrpo.trainer.step import StepConfig, accumulate_gradients, build_optimizer, optimizer_step

CPU = torch.device("cpu")
#: bf16 vs fp32 on the same weights and batch (tiny model): |loss difference| and gradient cosine.
LOSS_ATOL, GRAD_COSINE = 2e-3, 0.99


def lora(seed=0, tied=False):
    base, tok = tiny_model(seed)
    if tied:
        base.get_output_embeddings().weight = base.get_input_embeddings().weight
    model = attach_lora(base, ModelSpec(base_model="unused", lora_rank=4, lora_alpha=8, device="cpu"))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model.train(), tok


@pytest.mark.parametrize(("amx", "avx512_bf16", "expected"), [(True, True, torch.bfloat16), (True, False, torch.bfloat16),
                                                              (False, True, torch.float32), (False, False, torch.float32)])
def test_auto_on_cpu_picks_bf16_only_with_amx_like_the_rollout_policy(monkeypatch, amx, avx512_bf16, expected):
    from streamgrpo.inference.numerics import resolve_dtype

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    assert P.resolve("auto", CPU) == expected
    # the sampler and the trainer on one machine compute in the same dtype
    assert resolve_dtype("auto", CPU).dtype == expected
    assert P.reason("auto", CPU) == resolve_dtype("auto", CPU).reason
    assert P.resolve("fp32", CPU) == torch.float32 and P.resolve("bf16", CPU) == torch.bfloat16
    assert P.reason("bf16", CPU) == "set explicitly"
    with pytest.raises(ModelConfigError, match="auto"):
        P.resolve("fp16", CPU)


@pytest.mark.parametrize("tied", [False, True])
def test_bf16_keeps_lora_embeddings_norms_and_head_in_fp32(tied):
    model, _ = lora(tied=tied)
    P.prepare_for_training(model, torch.bfloat16)
    base = model.get_base_model()
    assert P.compute_dtype(model) == torch.bfloat16
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert "lora_" in name and p.dtype == torch.float32, name
        elif name.endswith("base_layer.weight") or "mlp" in name:
            assert p.dtype == torch.bfloat16, name
        else:  # embeddings, norms, head
            assert p.dtype == torch.float32, name
    assert base.get_output_embeddings().weight.dtype == torch.float32
    if tied:
        assert base.get_output_embeddings().weight is base.get_input_embeddings().weight


def test_bf16_step_updates_fp32_master_weights_with_fp32_optimizer_state():
    model, tok = lora()
    P.prepare_for_training(model, torch.bfloat16)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = build_optimizer(model, lr=1e-2)
    batch = build_batch(make_samples(tok, 4, seed=1), max_seq_len=128, normalisation="rollout_mean", max_tokens=32)
    m = optimizer_step(model, optimizer, None, micro_batches(batch, 4096),
                       StepConfig(loss=build_loss("grpo"), loss_config=LossConfig()))
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed and all("lora_" in n for n in changed) and m["grad_norm"] > 0
    states = [s for s in optimizer.state.values()]
    assert states and all(s["exp_avg"].dtype == torch.float32 and s["exp_avg_sq"].dtype == torch.float32
                          for s in states)


@pytest.mark.parametrize("share_prefix", [False, True])
def test_bf16_loss_and_gradient_match_fp32_within_tolerance(share_prefix):
    fp32, tok = lora()
    bf16 = copy.deepcopy(fp32)
    P.prepare_for_training(bf16, torch.bfloat16)
    samples = make_samples(tok, 6, seed=2, model=fp32)  # behaviour logprobs of the fp32 policy
    batch = build_batch(samples, max_seq_len=128, normalisation="rollout_mean", max_tokens=32)
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(kl_coef=0.05), share_prefix=share_prefix)

    def run(model):
        model.zero_grad()
        sums = accumulate_gradients(model, [batch], cfg)
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
        return sums["loss"], grad

    loss32, g32 = run(fp32)
    loss16, g16 = run(bf16)
    assert abs(loss16 - loss32) <= LOSS_ATOL, (loss16, loss32)
    assert float(torch.nn.functional.cosine_similarity(g16, g32, dim=0)) >= GRAD_COSINE
    with torch.no_grad():
        lp32 = token_logprobs(fp32, batch.input_ids, batch.attention_mask, 1.0, only=batch.action_mask)
        lp16 = token_logprobs(bf16, batch.input_ids, batch.attention_mask, 1.0, only=batch.action_mask)
    assert lp16.dtype == torch.float32
    assert 0 < float((lp16 - lp32).abs().max()) < 0.05  # bf16 really ran, and stayed close


def test_load_policy_prepares_the_requested_precision(tmp_path):
    model, _ = tiny_model(0)
    model.save_pretrained(tmp_path)
    spec = ModelSpec(base_model=str(tmp_path), lora_rank=2, lora_alpha=4, device="cpu")
    fp32 = load_policy(ModelSpec(**{**spec.__dict__, "precision": "fp32"}))
    assert {p.dtype for p in fp32.parameters()} == {torch.float32}
    bf16 = load_policy(ModelSpec(**{**spec.__dict__, "precision": "bf16"}))
    assert P.compute_dtype(bf16) == torch.bfloat16
    assert {p.dtype for p in bf16.parameters() if p.requires_grad} == {torch.float32}
