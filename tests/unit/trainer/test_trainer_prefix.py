"""Shared-prefix forward: the prefix tree, and the same log-probs and gradients as each row alone."""

from __future__ import annotations

import pytest
import torch
from support.tiny_model import tiny_model

from streamgrpo.avro import records as R
from streamgrpo.trainer import prefix
from streamgrpo.trainer.batching import build_batch, micro_batches
from streamgrpo.trainer.losses import LossConfig, build_loss
from streamgrpo.trainer.model import ModelSpec, attach_lora, token_logprobs
from streamgrpo.trainer.step import StepConfig, accumulate_gradients, build_optimizer, optimizer_step

SYSTEM = "You plan the steps of a tool-using assistant. Reply with ONE JSON object only. Tools: calc, search.\n"


def policy(seed=0):
    base, tok = tiny_model(seed)
    model = attach_lora(base, ModelSpec(base_model="unused", lora_rank=4, lora_alpha=8, device="cpu"))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    model.train()
    return model, tok


def planner_samples(tok, groups=2, size=3, seed=0):
    """Samples shaped like a planner's: one system prompt for all, a question per group, first-turn
    prompts identical within a group, later turns with their own history; random actions."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(groups):
        question = f"Question: what is {k * 37 + 5} times {k + 3}?\n"
        for i in range(size):
            history = ""
            turns = []
            for t in range(1 + i % 2):
                prompt = tok.encode(SYSTEM + question + history + "Reply:", add_special_tokens=False)
                action = torch.randint(4, len(tok), (4 + (i + t) % 5,), generator=g).tolist()
                logps = (-torch.rand(len(action), generator=g) * 2).tolist()
                turns.append(R.SampleTurn(t + 1, prompt, action, logps))
                history += f"Step {t + 1}: {tok.decode(action)} -> {i * 11}\n"
            out.append(R.TrainingSample(
                envelope=R.Envelope.new("test", group_id=f"g{k}", rollout_id=f"g{k}r{i}"), turns=turns,
                advantage=float(i % 3) - 1.0, reward=0.0, group_mean=0.0, group_std=1.0, group_size=size,
                estimator="grpo", adapter_name="planner", behaviour_version=0,
                sampling=R.SamplingParams(0.6 + 0.2 * k, 1.0, 16)))
    return out


def test_plan_shares_the_common_prefix_and_group_prompts():
    system, question = list(range(100, 130)), list(range(200, 220))
    seqs = [system + question + [30, 31], system + question + [32, 33, 34],
            system + list(range(300, 330)), [9, 9, 9],
            system + question[:3] + [7, 7],  # 3 more tokens shared with rows 0-1
            system + list(range(300, 304)) + [8]]  # 4 more shared with row 2: not worth a forward call
    limits = [50, 50, 55, 2, 33, 34]
    root = prefix.plan(seqs, limits)
    assert (root.start, root.end) == (0, 0) and root.leaves == (3,)  # row 3 shares nothing
    [shared] = root.children
    assert (shared.start, shared.end, shared.rows) == (0, 30, (0, 1, 2, 4, 5))
    assert shared.leaves == (2, 5)
    [short] = shared.children  # a short span, kept because the rows below it share more
    assert (short.start, short.end, short.leaves) == (30, 33, (4,))
    [group] = short.children  # rows 0 and 1 share the whole question, up to their limit
    assert (group.start, group.end, group.leaves) == (33, 50, (0, 1))
    lengths = [len(s) for s in seqs]
    assert root.computed_tokens(lengths) == 30 + 3 + 17 + (2 + 3) + 2 + (30 + 5) + 3
    assert prefix.shared_tokens_cost(seqs) <= root.computed_tokens(lengths) < sum(lengths)


def test_plan_never_shares_a_position_whose_hidden_state_predicts_an_action_token():
    seqs = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]]  # identical rows (the same action sampled twice)
    root = prefix.plan(seqs, [3, 3])
    nodes = [root, *root.children]
    assert all(n.end <= 3 for n in nodes)
    assert sorted(r for n in nodes for r in n.leaves) == [0, 1]


def test_shared_prefix_logprobs_and_gradients_equal_each_row_alone():
    model, tok = policy()
    batch = build_batch(planner_samples(tok), max_seq_len=512, normalisation="rollout_mean", max_tokens=32)
    seqs = [batch.input_ids[i, :n].tolist() for i, n in enumerate(batch.attention_mask.sum(1).tolist())]
    assert prefix.shared_tokens_cost(seqs) < 0.5 * sum(len(s) for s in seqs)  # the batch really shares
    mask = batch.action_mask
    params = [p for p in model.parameters() if p.requires_grad]

    def run(share):
        model.zero_grad()
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.temperature, only=mask,
                              share_prefix=share)
        (logp * mask * batch.advantages[:, None]).sum().backward()
        return logp.detach(), [p.grad.clone() for p in params]

    alone, g_alone = run(False)
    shared, g_shared = run(True)
    torch.testing.assert_close(shared, alone, atol=1e-5, rtol=1e-5)
    assert (shared[~mask] == 0).all()
    assert any(float(g.abs().sum()) > 0 for g in g_alone)
    for a, b in zip(g_shared, g_alone, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_shared_prefix_micro_batch_accumulation_equals_one_big_batch():
    model, tok = policy()
    batch = build_batch(planner_samples(tok, groups=3), max_seq_len=512, normalisation="rollout_mean", max_tokens=32)
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(kl_coef=0.05), share_prefix=True)
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad()
    whole = accumulate_gradients(model, [batch], cfg)
    g_whole = [p.grad.clone() for p in params]
    model.zero_grad()
    parts = micro_batches(batch, token_budget=200, share_prefix=True)
    assert len(parts) >= 2
    split = accumulate_gradients(model, parts, cfg)
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-4, abs=1e-6)
    assert split["tokens"] == whole["tokens"]
    for a, p in zip(g_whole, params, strict=True):
        torch.testing.assert_close(p.grad, a, rtol=1e-4, atol=1e-6)


def test_shared_prefix_micro_batches_keep_a_group_together_within_the_tree_budget():
    _, tok = policy()
    batch = build_batch(planner_samples(tok, groups=3), max_seq_len=512, normalisation="rollout_mean", max_tokens=32)
    budget = 200
    parts = micro_batches(batch, token_budget=budget, share_prefix=True)
    for part in parts:
        seqs = [part.input_ids[i, :n].tolist() for i, n in enumerate(part.attention_mask.sum(1).tolist())]
        assert prefix.shared_tokens_cost(seqs) <= budget or len(seqs) == 1
    assert sum(p.input_ids.shape[0] for p in parts) == batch.input_ids.shape[0]
    assert sum(float(p.token_weights.sum()) for p in parts) == pytest.approx(1.0)
    # fewer micro-batches than padded-token planning needs for the same budget
    assert len(parts) < len(micro_batches(batch, token_budget=budget, share_prefix=False))


def test_params_change_after_one_shared_prefix_step():
    model, tok = policy()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    batch = build_batch(planner_samples(tok), max_seq_len=512, normalisation="rollout_mean", max_tokens=32)
    optimizer = build_optimizer(model, lr=1e-2)
    m = optimizer_step(model, optimizer, None, micro_batches(batch, 4096),
                       StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(), share_prefix=True))
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed and all("lora_" in n for n in changed)
    assert m["grad_norm"] > 0
