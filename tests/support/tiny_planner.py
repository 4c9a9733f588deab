"""A tiny Llama planner trained in-process to answer the planner prompt of single-digit sums with
``{"answer": "<random digit>"}`` (right about one time in ten at temperature 1: groups have reward
variance, so the trainer steps). For end-to-end runs of the whole loop on CPU in minutes."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import torch

from streamgrpo.avro import records as R

QUESTIONS = [(f"What is {a} plus {b}?", str(a + b)) for a in range(1, 5) for b in range(1, 5) if a + b < 10]


def build_tiny_planner(path: Path) -> None:
    """Save the tiny planner (model + tokenizer) to ``path`` (about a minute; built on one CPU thread, so the
    same model on every machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _build(path)
    finally:
        torch.set_num_threads(threads)


def _build(path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from streamgrpo.inference.local import LocalPolicy
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.loop import run_groups
    from streamgrpo.rollout.runtime import build_context
    from support.tiny_policy import build_tiny_tokenizer

    torch.manual_seed(0)
    tok = build_tiny_tokenizer()
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    prompts: dict[str, list[int]] = {}

    def sink(event: R.Event) -> None:
        if isinstance(event, R.PlannerAction) and event.envelope.turn == 1:
            prompts[str(event.envelope.task_id)] = list(event.prompt_token_ids)

    # a copy: the fast engine adopts the weights it serves (fused views), and this model is trained and saved
    ctx = build_context(RolloutConfig(), LocalPolicy.from_model(copy.deepcopy(model), tok))
    sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=4)
    requests = [[R.RolloutRequest(R.Envelope.new("t", task_id=f"q{i}", group_id=f"g{i}", rollout_id=f"r{i}"), q,
                                  "math", 0, 1, "planner", 0, 1, sampling)] for i, (q, _) in enumerate(QUESTIONS)]
    run_groups(requests, ctx, sink)
    rng = random.Random(0)
    rows = []
    for p in prompts.values():
        for _ in range(6):
            target = tok.encode(f'answer": "{rng.randint(0, 9)}"}}', add_special_tokens=False) + [tok.eos_token_id]
            rows.append((p, target))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(120):
        batch = rng.sample(rows, 16)
        opt.zero_grad()
        loss = sum(torch.nn.functional.cross_entropy(
            model(input_ids=torch.tensor([p + t[:-1]])).logits[0, len(p) - 1:], torch.tensor(t)) for p, t in batch)
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
