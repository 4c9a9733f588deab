"""The default loop closes: `streamgrpo run` with a tiny in-process-trained model on the real broker.

A tiny Llama (character-level tokenizer) is first trained, in full, to reply to the planner prompt of
single-digit sums with `{"answer": "<digit>"}` where the digit is random: sampled at temperature 1 it
answers right about one time in ten, so groups have reward variance and the trainer steps. Then the
real `streamgrpo run` (broker, streams with default admission, judge, rollout worker, trainer,
evaluator) serves it with the DEFAULT loop settings, and the events must show: every adapter
version published before the last two is served by rollouts, within at most 2 trainer steps of its
publication, and fewer than 5 % of the samples are dropped as stale.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from streamgrpo.avro import records as R
from streamgrpo.cli.progress import Progress
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(1200)]

QUESTIONS = [(f"What is {a} plus {b}?", str(a + b)) for a in range(1, 5) for b in range(1, 5) if a + b < 10]


def _tiny_base(path: Path) -> None:
    """Save a tiny Llama + tokenizer trained to answer {"answer": "<random digit>"} to the planner prompt."""
    from support.tiny_policy import build_tiny_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.loop import run_groups
    from streamgrpo.rollout.policy.local import LocalPolicy
    from streamgrpo.rollout.runtime import build_context

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

    ctx = build_context(RolloutConfig(), LocalPolicy.from_model(model, tok))
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
        loss = sum(torch.nn.functional.cross_entropy(model(input_ids=torch.tensor([p + t[:-1]])).logits[0, len(p) - 1:],
                                                     torch.tensor(t)) for p, t in batch)
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-planner")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _tiny_base(path)
    finally:
        torch.set_num_threads(threads)
    return path


def test_every_adapter_serves_within_two_trainer_steps(kafka_ns: KafkaSettings, tmp_path: Path,
                                                        tiny_base: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": q, "answer": a, "source": "math"}) + "\n"
                             for q, a in QUESTIONS * 40))
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(  # the model and short timeouts only: every loop setting keeps its default
        f'[kafka]\ntopic_prefix = "{kafka_ns.topic_prefix}"\nsession_timeout_ms = 3000\n\n'
        f'[rollout]\nmodel = "{tiny_base}"\nmetrics_port = 0\n\n'
        f'[trainer]\nbase_model = "{tiny_base}"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = 0\n\n'
        "[streams]\nmetrics_port = 0\n\n[judge]\nmetrics_port = 0\n\n"
        "[evaluator]\nenabled = false\n")
    home = tmp_path / "home"
    env = dict(os.environ, STREAMGRPO_CONFIG=str(cfg))
    env.pop("STREAMGRPO_BOOTSTRAP", None)
    proc = subprocess.run(
        [sys.executable, "-m", "streamgrpo.cli", "run", "--bootstrap", kafka_ns.bootstrap or "", "--home", str(home),
         "--tasks", str(tasks), "--duration", "900", "--until-version", "5", "--group-size", "8", "--no-final-eval"],
        env=env, capture_output=True, text=True, timeout=1100,
    )
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(home.glob("runs/*/logs/*.log")))
    assert proc.returncode == 0 and "stopping (--until-version)" in proc.stdout, proc.stdout[-3000:] + logs

    progress = Progress()
    for topic in ("rollouts", "adapter-events"):
        for r in read_topic(kafka_ns, topic):
            if r.event is not None:
                progress.apply(r.event)
    loop = progress.loop_closure()
    served = [v for v in progress.published_at if v in progress.first_served]
    assert max(served) >= 5, loop
    late = [v for v in progress.published_at if v < max(progress.published_at) - 1 and v not in progress.first_served]
    assert not late, f"versions never served: {late} ({loop})"
    assert loop["trainer_steps_to_first_rollout"]["max"] <= 2, loop
    assert loop["stale_share"] < 0.05, loop
