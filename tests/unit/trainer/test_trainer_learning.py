"""Learning test: GRPO steps on the tiny model raise the reward of a toy task above its baseline.

Task: after a fixed prompt, sample 4 tokens; reward = fraction of them that are digits (10 of the
99 ids, so a random policy scores ~0.1). Groups of 8 rollouts, GRPO advantages (r - mean) / std,
behaviour log-probs recorded at sampling time exactly as a rollout worker would.
"""

from __future__ import annotations

import torch
from support.tiny_model import tiny_model

from streamgrpo.avro import records as R
from streamgrpo.trainer.batching import build_batch, micro_batches
from streamgrpo.trainer.losses import LossConfig, build_loss
from streamgrpo.trainer.model import ModelSpec, attach_lora, token_logprobs
from streamgrpo.trainer.step import StepConfig, build_optimizer, optimizer_step

TEMPERATURE = 1.0
GROUP, GROUPS, ACTION_LEN = 8, 4, 4


def sample(model, prompt: list[int], gen: torch.Generator) -> tuple[list[list[int]], list[list[float]]]:
    """GROUPS * GROUP rollouts of ACTION_LEN tokens each -> (actions, behaviour logprobs)."""
    ids = torch.tensor([prompt] * (GROUPS * GROUP))
    with torch.no_grad():
        for _ in range(ACTION_LEN):
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, -1] / TEMPERATURE
            nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen)
            ids = torch.cat([ids, nxt], dim=1)
        logp = token_logprobs(model, ids, torch.ones_like(ids), TEMPERATURE)
    return ids[:, len(prompt):].tolist(), logp[:, len(prompt):].tolist()


def test_grpo_raises_reward_on_a_toy_task():
    torch.manual_seed(0)
    base, tok = tiny_model(seed=3)
    model = attach_lora(base, ModelSpec(base_model="tiny", lora_rank=8, lora_alpha=16, device="cpu",
                                            target_modules=("q_proj", "v_proj", "down_proj", "lm_head")))
    digits = set(tok.convert_tokens_to_ids(list("0123456789")))
    prompt = tok.encode("Say a number:", add_special_tokens=False)
    optimizer = build_optimizer(model, lr=1e-2)
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig())
    gen = torch.Generator().manual_seed(0)
    rewards_per_step = []
    for step in range(15):
        model.eval()
        samples, rewards = [], []
        all_actions, all_logps = sample(model, prompt, gen)
        for g in range(GROUPS):
            actions, logps = all_actions[g * GROUP:(g + 1) * GROUP], all_logps[g * GROUP:(g + 1) * GROUP]
            r = torch.tensor([sum(t in digits for t in a) / ACTION_LEN for a in actions])
            adv = (r - r.mean()) / (r.std() + 1e-6)
            rewards.extend(r.tolist())
            for a, lp, ad in zip(actions, logps, adv.tolist(), strict=True):
                samples.append(R.TrainingSample(
                    envelope=R.Envelope.new("test"), turns=[R.SampleTurn(0, prompt, a, lp)], advantage=ad,
                    reward=0.0, group_mean=0.0, group_std=1.0, group_size=GROUP, estimator="grpo",
                    adapter_name="planner", behaviour_version=step,
                    sampling=R.SamplingParams(TEMPERATURE, 1.0, ACTION_LEN)))
        rewards_per_step.append(sum(rewards) / len(rewards))
        model.train()
        batch = build_batch(samples, max_seq_len=64, normalisation="rollout_mean", max_tokens=ACTION_LEN)
        optimizer_step(model, optimizer, None, micro_batches(batch, 256), cfg)
    baseline = sum(rewards_per_step[:3]) / 3
    final = sum(rewards_per_step[-3:]) / 3
    assert baseline < 0.3, f"the toy task is too easy before training ({baseline:.2f})"
    print("mean reward per step:", [round(r, 3) for r in rewards_per_step])
    assert final > baseline + 0.25, f"reward did not rise: {baseline:.2f} -> {final:.2f} ({rewards_per_step})"
