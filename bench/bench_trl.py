"""Side by side: TRL's GRPOTrainer and streamgrpo on the same base model, tasks and budget.

Both sides: SmolLM2-135M-Instruct (the bundled GGUF, converted once), LoRA r=16/alpha=32 on the
attention projections, group size N=4, 2 tasks per optimizer step (8 completions), completion
length 48 tokens, temperature 1.0, learning rate 5e-5, K optimizer steps, CPU, fp32, the same
built-in tasks in the same order, and the same reward (streamgrpo's `builtin` judge on the final
answer).

What differs, by design: TRL generates one completion per prompt (single turn, no tools, the raw
question as the user message), while streamgrpo runs its agent loop (planner turns + tools,
model-free executor/verifier, at most 2 planner turns of up to 48 tokens each) and trains every
planner turn with the trajectory's advantage; lookup/two-step tasks need the archive tool, which
only streamgrpo has. Both score with the `builtin` judge (hybrid: correctness + format); the TRL
completion is judged as an ANSWERED 1-turn rollout. streamgrpo holds two model copies (rollout
policy + trainer model, as its separate services do), TRL one, so its peak RSS is higher. A
streamgrpo step whose groups all have zero reward variance trains nothing (no samples), while TRL
still runs its (zero-advantage) backward pass. Both: PPO clip 0.2, grad-norm clip 1.0, constant
LR, no KL, one gradient step per generation batch. Kafka is not in this comparison (its cost is
measured by bench_broker.py / bench_streams.py): the streamgrpo side calls its rollout loop,
judge, advantage window, trainer step and adapter store in-process. Timings: TRL generation_s
times `GRPOTrainer._generate`; its trainer_s = step time minus `_generate_and_score_completions`
(forward, backward, optimizer); its trainer tokens = growth of `num_input_tokens_seen` (prompt +
completion tokens). streamgrpo trainer tokens = non-pad tokens of the trained rows.

Each side runs in its own subprocess so peak RSS is its own. Prints one JSON line with both.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

K_STEPS = int(os.environ.get("BENCH_TRL_STEPS", "4"))
GROUP = 4
TASKS_PER_STEP = 2
COMPLETION_LEN = 48
LR = 5e-5
LORA: dict[str, Any] = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
SEED = 0


def _tasks(n: int) -> list[Any]:
    from streamgrpo.tasks.builtin import builtin_tasks

    rows = builtin_tasks()
    return rows[:: max(1, len(rows) // n)][:n]


class BuiltinJudge:
    """The judge streamgrpo routes the ``builtin`` source to (``JudgeSettings().routes``), on one answer.

    Both sides score with the same scorer object type and settings: the TRL side through
    ``__call__`` (one single-turn completion = an ANSWERED rollout of 1 turn, no tool calls), the
    streamgrpo side through ``scorer_for`` inside the judge's own ``decide_reward``.
    """

    def __init__(self) -> None:
        from streamgrpo.judge.config import JudgeSettings
        from streamgrpo.judge.service import Router

        self.router = Router(JudgeSettings())

    def scorer_for(self, source: str) -> Any:
        return self.router.scorer_for(source)

    def __call__(self, question: str, answer: str, truths: list[str], source: str) -> float:
        from streamgrpo.judge.scorers import Candidate

        cand = Candidate(question=question, answer=answer, ground_truths=tuple(truths), status="ANSWERED", turns=1)
        return float(self.scorer_for(source).score(cand).score)


def _reward_fn() -> BuiltinJudge:
    """The judge streamgrpo uses for the built-in source, on (question, answer, ground truths, source)."""
    return BuiltinJudge()


def run_trl() -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, GenerationConfig, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from streamgrpo.models.base import resolve_base_model

    torch.manual_seed(SEED)
    model_path = str(resolve_base_model("smollm2-135m-instruct"))
    rows = _tasks(K_STEPS * TASKS_PER_STEP)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": r.question}], "truths": r.ground_truths,
                             "question": r.question, "source": r.source} for r in rows])
    score = _reward_fn()

    def reward(completions: list[Any], truths: list[list[str]], question: list[str], source: list[str],
               **_: Any) -> list[float | None]:
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [score(q, t, g, s) for q, t, g, s in zip(question, texts, truths, source, strict=True)]

    times: list[float] = []

    class Timer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            times.append(time.perf_counter())

        def on_step_end(self, *a: Any, **k: Any) -> None:
            times[-1] = time.perf_counter() - times[-1]

    out = tempfile.mkdtemp()
    cfg = GRPOConfig(
        output_dir=out, per_device_train_batch_size=GROUP * TASKS_PER_STEP, num_generations=GROUP,
        max_completion_length=COMPLETION_LEN, learning_rate=LR, max_steps=K_STEPS, logging_steps=1,
        use_cpu=True, report_to="none", save_strategy="no", bf16=False, temperature=1.0, top_p=1.0,
        seed=SEED, beta=0.0, loss_type="grpo", shuffle_dataset=False, lr_scheduler_type="constant",
        epsilon=0.2, max_grad_norm=1.0, num_iterations=1, steps_per_generation=1, gradient_accumulation_steps=1,
    )
    tok = AutoTokenizer.from_pretrained(model_path)
    # the GGUF-converted tokenizer labels <|im_start|> as eos; the generation config (which streamgrpo's
    # LocalPolicy stops on) says <|im_end|>. Align the tokenizer so both sides stop on the same token.
    eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    tok.eos_token = tok.pad_token = tok.convert_ids_to_tokens(eos[0] if isinstance(eos, list) else eos)
    trainer = GRPOTrainer(model=model_path, reward_funcs=reward, args=cfg, train_dataset=ds, processing_class=tok,
                          peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA), callbacks=[Timer()])
    gen_s = _time_method(trainer, "_generate")  # sampling only
    rollout_s = _time_method(trainer, "_generate_and_score_completions")  # sampling + reward + advantages
    t = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t
    shutil.rmtree(out, ignore_errors=True)
    logs = [h for h in trainer.state.log_history if "reward" in h]
    gen_tokens = round(sum(h.get("completions/mean_length", 0) * GROUP * TASKS_PER_STEP for h in logs))
    seen = [h["num_tokens"] for h in logs if "num_tokens" in h]
    train_tokens = seen[-1] if len(seen) == len(logs) and seen else None
    train_s = sum(times) - sum(rollout_s)
    return {
        "steps": len(times), "s_per_step": sum(times) / max(1, len(times)), "total_s": total,
        "generation_s": sum(gen_s), "generated_tokens": gen_tokens,
        "prompt_tokens": train_tokens - gen_tokens if train_tokens is not None else None,
        "generated_tokens_per_s": gen_tokens / max(1e-9, sum(gen_s)),
        "trainer_s": train_s, "trainer_tokens": train_tokens,
        "trainer_tokens_per_s": train_tokens / train_s if train_tokens and train_s > 0 else None,
        "reward_per_step": [round(h["reward"], 4) for h in logs],
        "reward_last2": sum(h["reward"] for h in logs[-2:]) / max(1, len(logs[-2:])),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _time_method(obj: Any, name: str) -> list[float]:
    """Wrap ``obj.name`` (instance attribute) so every call's wall time is appended to the returned list."""
    inner = getattr(obj, name)
    spent: list[float] = []

    def timed(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent.append(time.perf_counter() - t)

    setattr(obj, name, timed)
    return spent


def run_streamgrpo() -> dict[str, Any]:
    from bench_trl_streamgrpo import run as run_sg  # the streamgrpo side lives beside this file

    out = run_sg(k_steps=K_STEPS, group=GROUP, tasks_per_step=TASKS_PER_STEP, completion_len=COMPLETION_LEN,
                 lr=LR, lora=LORA, seed=SEED, tasks=_tasks(K_STEPS * TASKS_PER_STEP), reward=_reward_fn())
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _side(name: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent)))
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr[-1500:]}
    return dict(json.loads(lines[-1]))


def main() -> dict[str, Any]:
    trl = _side("trl")
    sg = _side("streamgrpo")
    keys = ["s_per_step", "generation_s", "prompt_tokens", "generated_tokens", "generated_tokens_per_s", "trainer_s",
            "trainer_tokens_per_s", "peak_rss_mb", "reward_last2"]
    table = ["| metric | TRL GRPOTrainer | streamgrpo |", "|---|---|---|"]
    for k in keys:
        table.append(f"| {k} | {_cell(trl.get(k))} | {_cell(sg.get(k))} |")
    return {
        "bench": "trl", "k_steps": K_STEPS, "group_size": GROUP, "tasks_per_step": TASKS_PER_STEP,
        "completion_len": COMPLETION_LEN, "lr": LR, "trl": trl, "streamgrpo": sg, "table": "\n".join(table),
        "notes": __doc__.split("What differs, by design:")[1].split("Each side")[0].strip().replace("\n", " "),
    }


def _cell(v: Any) -> str:
    return f"{v:,.3f}" if isinstance(v, float) else ("n/a" if v is None else str(v))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "trl":
        print(json.dumps(run_trl()))
    elif len(sys.argv) > 1 and sys.argv[1] == "streamgrpo":
        print(json.dumps(run_streamgrpo()))
    else:
        print(json.dumps(main()))
