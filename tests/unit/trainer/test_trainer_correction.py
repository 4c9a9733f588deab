"""Off-policy correction for a bf16 sampler and an fp32 trainer: the truncated-IS estimator's expectation
over the sampler's distribution is the on-policy gradient; ignoring the mismatch is not.

A tiny policy (logits scaled up so its bf16 copy differs from it like SmolLM2's does: |delta logp| of a
few 0.01) samples one-token actions in bf16 with the rollout sampler; the trainer recomputes in fp32.
Expectations are exact: every vocabulary token is one row, weighted by its sampling probability, so
``sum_a mu(a) * grad(loss_a)`` is the estimator's expected gradient (no Monte-Carlo noise).
"""

from __future__ import annotations

import copy

import torch
from support.tiny_model import tiny_model

from streamgrpo.inference.sampling import behaviour_logprobs, sample_batch
from streamgrpo.trainer.losses import LossConfig, LossInputs, build_loss
from streamgrpo.trainer.model import ModelSpec, attach_lora, token_logprobs

TEMPERATURE = 0.8


def policies():
    base, tok = tiny_model(4)
    with torch.no_grad():
        base.get_output_embeddings().weight.mul_(40.0)  # peaked logits, as a trained LM's
    with torch.random.fork_rng(devices=[]):  # LoRA A is initialised from the global RNG: fix it, whatever ran before
        torch.manual_seed(0)
        model = attach_lora(base, ModelSpec(base_model="unused", lora_rank=4, lora_alpha=8, device="cpu"))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    sampler = copy.deepcopy(model).to(torch.bfloat16).eval()  # a bf16 rollout engine with the same weights
    return model.train(), sampler, tok


def every_action(prompt: list[int], vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(V, P+1) rows prompt + a for every token a, and their action mask."""
    ids = torch.tensor([prompt + [a] for a in range(vocab)])
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, -1] = True
    return ids, mask


def expected_gradient(model, ids, mask, behaviour, advantages, sampling_prob, cfg):
    """sum_a mu(a) grad loss(a): the expectation of the estimator over the sampler's tokens."""
    model.zero_grad()
    logp = token_logprobs(model, ids, torch.ones_like(ids), TEMPERATURE, only=mask)
    blogp = torch.zeros_like(logp)
    blogp[:, -1] = behaviour
    weights = torch.zeros_like(logp)
    weights[:, -1] = sampling_prob
    out = build_loss("grpo")(LossInputs(logp, blogp, advantages, mask, weights, sampling_prob), cfg)
    out.loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad]), out, logp.detach()[:, -1]


def test_tis_expectation_under_a_bf16_sampler_is_the_on_policy_gradient():
    model, sampler, tok = policies()
    vocab = len(tok)
    prompt = tok.encode("Q: name a digit. A:", add_special_tokens=False)
    ids, mask = every_action(prompt, vocab)
    with torch.no_grad():  # the sampler's distribution mu, computed as the rollout sampler records it
        logits = sampler(input_ids=ids[:1, :-1], attention_mask=torch.ones_like(ids[:1, :-1])).logits[0, -1]
        mu_logp = behaviour_logprobs(logits[None], TEMPERATURE)[0]  # (V,)
        pi_logp = token_logprobs(model, ids, torch.ones_like(ids), TEMPERATURE, only=mask)[:, -1]  # (V,) fp32
    drawn = sample_batch(sampler, [prompt] * 16, temperature=TEMPERATURE, top_p=1.0, max_new_tokens=1,
                         eos_ids={2}, pad_id=0, seed=3)
    for row in drawn:  # what a rollout records is exactly mu
        assert abs(row.logprobs[0] - float(mu_logp[row.token_ids[0]])) < 1e-6
    gap = (pi_logp - mu_logp).abs()
    assert 0.005 < float((gap * mu_logp.exp()).sum()) and float(gap.max()) < 0.5  # a real, bf16-sized mismatch

    g = torch.Generator().manual_seed(0)
    advantages = torch.randn(vocab, generator=g)
    mu, pi = mu_logp.exp(), pi_logp.exp()
    # on-policy: sum_a pi(a) A(a) grad log pi(a), sampled by the trainer's own fp32 policy
    on_policy, _, _ = expected_gradient(model, ids, mask, pi_logp, advantages, pi, LossConfig(tis_cap=1e9))
    corrected, out, _ = expected_gradient(model, ids, mask, mu_logp, advantages, mu, LossConfig(tis_cap=1e9))
    # ignoring the mismatch: the sampler's tokens treated as the trainer's own (weight 1)
    ignored, _, _ = expected_gradient(model, ids, mask, pi_logp, advantages, mu, LossConfig(tis_cap=1e9))

    def rel(x):
        return float((x - on_policy).norm() / on_policy.norm())

    assert out.truncated.item() == 0
    assert rel(corrected) < 1e-4, rel(corrected)
    assert rel(ignored) > 20 * max(rel(corrected), 1e-5), (rel(ignored), rel(corrected))


def test_tis_weights_are_the_capped_trainer_to_sampler_ratio_and_count_truncations():
    model, sampler, tok = policies()
    prompt = tok.encode("Q: name a digit. A:", add_special_tokens=False)
    ids, mask = every_action(prompt, len(tok))
    with torch.no_grad():
        logits = sampler(input_ids=ids[:1, :-1], attention_mask=torch.ones_like(ids[:1, :-1])).logits[0, -1]
        mu_logp = behaviour_logprobs(logits[None], TEMPERATURE)[0]
    advantages = torch.ones(len(tok))
    uniform = torch.full((len(tok),), 1.0 / len(tok))
    cap = 1.02
    grad, out, pi_logp = expected_gradient(model, ids, mask, mu_logp, advantages, uniform, LossConfig(tis_cap=cap))
    ratio = (pi_logp - mu_logp).exp()
    assert 0 < int(out.truncated.item()) == int((ratio > cap).sum()) < len(tok)
    torch.testing.assert_close(out.is_weight, ratio.clamp(max=cap).sum(), rtol=1e-5, atol=1e-5)
    # the loss value is -sum_a u(a) * w(a) * A(a) (ratio to the trainer's own recomputation is 1)
    torch.testing.assert_close(out.loss, -(uniform * ratio.clamp(max=cap)).sum(), rtol=1e-5, atol=1e-6)
    assert float(grad.abs().sum()) > 0

