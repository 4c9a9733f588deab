"""Synthetic TrainingSamples for tests, smoke runs and benchmarks (no broker, no rollouts).

:func:`make_samples` builds multi-turn samples from a tokenizer: prompts are short texts, actions
random token ids, and the behaviour log-probs either come from ``model`` (exactly what a rollout
with that policy and temperature would record, so the importance ratio starts at 1) or are
random negatives. Not covered: realistic agent prompts or rewards.
"""

from __future__ import annotations

from typing import Any

import torch

from streamgrpo.avro import ids
from streamgrpo.avro import records as R


def _logprobs(model: Any, prompt: list[int], action: list[int], temperature: float) -> list[float]:
    from streamgrpo.trainer.model import token_logprobs

    ids = torch.tensor([prompt + action])
    with torch.no_grad():
        logp = token_logprobs(model, ids, torch.ones_like(ids), temperature)
    return logp[0, len(prompt):].tolist()


def make_samples(
    tokenizer: Any, n: int, *, seed: int = 0, adapter_name: str = "planner", behaviour_version: int = 0,
    model: Any = None, temperature: float = 1.0, max_turns: int = 3, max_action: int = 12,
) -> list[R.TrainingSample]:
    """``n`` samples with 1..max_turns turns, advantages in {-1, 0, 1}, ids ``derived_id("sample", seed, i)``."""
    g = torch.Generator().manual_seed(seed)
    vocab = len(tokenizer)
    out = []
    for i in range(n):
        group = f"g{seed}-{i // 4}"
        turns = []
        for t in range(1 + i % max_turns):
            prompt = tokenizer.encode(f"q{i} turn {t}: what is {i}+{t}?", add_special_tokens=False)
            action = torch.randint(4, vocab, (3 + (i * 7 + t) % (max_action - 2),), generator=g).tolist()
            logps = (_logprobs(model, prompt, action, temperature) if model is not None
                     else (-torch.rand(len(action), generator=g) * 5).tolist())
            turns.append(R.SampleTurn(turn=t, prompt_token_ids=prompt, action_token_ids=action, behaviour_logprobs=logps))
        rollout = f"{group}-r{i % 4}"
        out.append(R.TrainingSample(
            envelope=R.Envelope.new("synthetic", event_id=ids.derived_id("sample", seed, i), task_id=f"t{seed}-{i // 4}",
                                    group_id=group, rollout_id=rollout),
            turns=turns, advantage=float(i % 3) - 1.0, reward=float(i % 3), group_mean=1.0, group_std=1.0,
            group_size=4, estimator="grpo", adapter_name=adapter_name, behaviour_version=behaviour_version,
        ))
    return out
