"""Trainer step on SmolLM2-135M (CPU): log-probs of the action tokens only vs full (B, T, V) logits.

Each mode runs in its own process (so peak RSS is per mode) on the same synthetic optimizer batch:
``--samples`` TrainingSamples of one or two planner turns with ``--prompt-tokens`` prompt tokens and
``--action-tokens`` action tokens each (the shape of real planner samples: long agent prompts,
short JSON actions), GRPO loss with the KL term on (so the reference pass runs too), micro-batches
of ``--micro-batch-tokens``. The baseline is the same step with the output head run on every
position (the path taken before, and still taken by models with logit soft-capping).

    python bench/bench_trainer_step.py --steps 3

What is covered: forward + backward + optimizer of one trainer step, time and peak RSS. What is
not: Kafka, adapter publishing, GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

MODES = ("action_only", "full_logits")


def samples(tokenizer_len: int, n: int, prompt_tokens: int, action_tokens: int, seed: int) -> list:
    import torch

    from streamgrpo.avro import ids
    from streamgrpo.avro import records as R

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        turns = []
        for t in range(1 + i % 2):
            prompt = torch.randint(10, tokenizer_len, (prompt_tokens + 16 * t,), generator=g).tolist()
            action = torch.randint(10, tokenizer_len, (action_tokens,), generator=g).tolist()
            logps = (-torch.rand(action_tokens, generator=g) * 3).tolist()
            turns.append(R.SampleTurn(turn=t, prompt_token_ids=prompt, action_token_ids=action, behaviour_logprobs=logps))
        out.append(R.TrainingSample(
            envelope=R.Envelope.new("bench", event_id=ids.derived_id("bench", seed, i), task_id=f"t{i // 4}",
                                    group_id=f"g{i // 4}", rollout_id=f"r{i}"),
            turns=turns, advantage=float(i % 3) - 1.0, reward=float(i % 3), group_mean=1.0, group_std=1.0,
            group_size=4, estimator="grpo", adapter_name="planner", behaviour_version=0))
    return out


def run_mode(args: argparse.Namespace) -> dict[str, object]:
    import torch

    import streamgrpo.trainer.model as M
    from streamgrpo.trainer.batching import build_batch, micro_batches
    from streamgrpo.trainer.losses import LossConfig, build_loss
    from streamgrpo.trainer.schedules import build_scheduler
    from streamgrpo.trainer.step import StepConfig, build_optimizer, optimizer_step

    torch.set_num_threads(args.threads)
    if args.mode == "full_logits":
        M._decoder_and_head = lambda model: None  # the baseline: output head over every position
    model = M.load_policy(M.ModelSpec(base_model=args.model, device="cpu"))
    tokenizer_len = model.get_base_model().config.vocab_size
    batch = build_batch(samples(tokenizer_len, args.samples, args.prompt_tokens, args.action_tokens, 0),
                        max_seq_len=2048, normalisation="rollout_mean", max_tokens=512)
    micro = micro_batches(batch, args.micro_batch_tokens)
    optimizer = build_optimizer(model, 1e-5)
    scheduler = build_scheduler(optimizer, "constant", warmup_steps=0, total_steps=args.steps + 1, min_ratio=0.1)
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(kl_coef=0.04), temperature=1.0)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times, losses = [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        metrics = optimizer_step(model, optimizer, scheduler, micro, cfg)
        times.append(time.perf_counter() - start)
        losses.append(round(metrics["loss"], 6))
    return {
        "mode": args.mode, "s_per_step": round(sum(times) / len(times), 2), "step_s": [round(t, 2) for t in times],
        "rows": int(batch.input_ids.shape[0]), "padded_tokens": batch.padded_tokens,
        "action_tokens": int(batch.action_mask.sum()), "micro_batches": len(micro),
        "peak_rss_mb_after_load": round(rss_before), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "loss_per_step": losses,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=8, help="TrainingSamples per optimizer step")
    ap.add_argument("--prompt-tokens", type=int, default=480)
    ap.add_argument("--action-tokens", type=int, default=32)
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mode", choices=MODES, default=None, help="run one mode in this process (internal)")
    args = ap.parse_args()
    if args.mode is not None:
        print(json.dumps(run_mode(args)))
        return
    results = {}
    for mode in MODES:
        print(f"[bench_trainer_step] {mode} ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, __file__, *sys.argv[1:], "--mode", mode]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
        results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    fast, full = results["action_only"], results["full_logits"]
    keys = ["s_per_step", "peak_rss_mb", "peak_rss_mb_after_load", "padded_tokens", "action_tokens", "micro_batches",
            "loss_per_step"]
    table = ["| metric | action_only | full_logits |", "|---|---|---|"]
    table += [f"| {k} | {fast[k]} | {full[k]} |" for k in keys]
    print(json.dumps({
        "bench": "trainer_step", "host": platform.node(), "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
        "model": args.model, "steps": args.steps, "samples": args.samples, "prompt_tokens": args.prompt_tokens,
        "action_tokens_per_turn": args.action_tokens, "micro_batch_tokens": args.micro_batch_tokens,
        "threads": args.threads, "speedup": round(full["s_per_step"] / fast["s_per_step"], 2),
        "table": "\n".join(table),
    }, indent=2))


if __name__ == "__main__":
    main()
