"""Trainer step on REALISTIC samples (SmolLM2-135M, CPU): today's defaults vs the fp32 path before.

Samples come from the real pipeline, in-process (no Kafka): built-in training tasks -> ``fan_out``
(group size ``--group-size``, T=1.0, top_p=1.0, ``--max-new-tokens``, ``--max-turns``) ->
``rollout.loop.run_group`` on a :class:`~streamgrpo.inference.local.LocalPolicy` in
``--policy-dtype`` (the planner's real prompts, SAMPLED actions and their true behaviour logprobs)
-> the judge (``judge.decide.decide_reward``) -> the advantage window (GRPO) ->
``streams.samples.build_sample`` (every planner turn, the trajectory's advantage, its sampling
parameters). Groups whose rewards are all equal train nothing and are skipped, as in the system,
until ``--samples`` samples are collected (one optimizer step's worth, ``samples_per_step``).

Each mode then runs in its own process (so peak RSS is per mode) on the same samples, from a fresh
LoRA adapter: ``--steps`` optimizer steps on them (lr 5e-5, grad clip 1.0, micro-batches of 4096
tokens). Step 1 is on-policy for the adapter (behaviour version 0 = the base model), so its loss,
clip fraction, gradient norm and the sampler/trainer log-prob mismatch describe a real step.

    python bench/bench_trainer_step.py --steps 3

Modes (:data:`MODES`): ``fp32_before`` is the path before (fp32, every row computed alone, padded
micro-batches, ratio against the behaviour logprobs); ``bf16``, ``bf16_shared_prefix`` and
``fp32_shared_prefix`` change the precision and/or the prefix sharing with the same estimator (so
their losses compare with fp32's); ``defaults`` is TrainerConfig's defaults (precision auto: fp32 on a
CPU without AMX, bf16 with AMX or on a bf16 GPU; shared prefix; truncated importance sampling).
Trainer tokens/s = (prompt + action) tokens of the trained rows / seconds per step (median).

What is covered: forward + backward + optimizer of one step, time, peak RSS, loss. What is not: Kafka,
adapter publishing, GPU.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: mode -> trainer settings (each mode in its own process)
MODES: dict[str, dict[str, Any]] = {
    "fp32_before": {"precision": "fp32", "share_prefix": False, "correction": "behaviour"},
    "bf16": {"precision": "bf16", "share_prefix": False, "correction": "behaviour"},
    "bf16_shared_prefix": {"precision": "bf16", "share_prefix": True, "correction": "behaviour"},
    "fp32_shared_prefix": {"precision": "fp32", "share_prefix": True, "correction": "behaviour"},
    "defaults": {},
}
BASELINE = "fp32_before"


def generate(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Roll out groups of built-in tasks until ``args.samples`` TrainingSamples exist; write them (Avro, base64 lines)."""
    import torch

    from streamgrpo.avro import records as R
    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.judge.service import Router
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.tasks.builtin import builtin_tasks

    torch.set_num_threads(args.threads)
    cfg = RolloutConfig(model=args.model, constrain=args.constrain, dtype=args.policy_dtype, max_turns=args.max_turns, follow_adapters=False,
                        tools={"enabled": ["calculator", "python", "knowledge_search"]})
    policy = build_policy(cfg)
    ctx, router = build_context(cfg, policy), Router(JudgeSettings())
    tasks = builtin_tasks()
    samples: list[Any] = []
    groups, skipped, start = 0, 0, time.perf_counter()
    sampling = R.SamplingParams(1.0, 1.0, args.max_new_tokens, seed=args.seed)
    while len(samples) < args.samples and groups < 4 * args.samples:
        task = tasks[(groups * 37) % len(tasks)]
        got = _group_samples(task, args, sampling, ctx, router)
        groups += 1
        skipped += not got
        samples.extend(got[: args.samples - len(samples)])
    write_samples(out, samples)
    rows = [t for s in samples for t in s.turns]
    return {
        "policy_dtype": str(getattr(policy, "dtype", args.policy_dtype)).removeprefix("torch."), "groups": groups, "zero_variance_groups_skipped": skipped,
        "generation_s": round(time.perf_counter() - start, 1), "samples": len(samples), "rows": len(rows),
        "prompt_tokens_per_row": round(statistics.mean(len(t.prompt_token_ids) for t in rows), 1),
        "action_tokens_per_row": round(statistics.mean(len(t.action_token_ids) for t in rows), 1),
        "advantages": [round(s.advantage, 3) for s in samples],
    }


def write_samples(path: Path, samples: list[Any]) -> None:
    """One TrainingSample per line: its Avro single-object encoding, base64."""
    from streamgrpo.avro.codec import Codec

    codec = Codec()
    path.write_text("".join(base64.b64encode(codec.encode(s)).decode() + "\n" for s in samples))


def read_samples(path: Path) -> list[Any]:
    from streamgrpo.avro import records as R
    from streamgrpo.avro.codec import Codec

    codec = Codec()
    return [codec.decode(base64.b64decode(line), R.TrainingSample) for line in path.read_text().splitlines()]


def _group_samples(row: Any, args: argparse.Namespace, sampling: Any, ctx: Any, router: Any) -> list[Any]:
    """One group of ``row`` through rollout -> judge -> window -> samples (none for a zero-variance group)."""
    from streamgrpo.avro import ids
    from streamgrpo.avro import records as R
    from streamgrpo.judge.decide import Reject, decide_reward
    from streamgrpo.rollout.loop import run_group
    from streamgrpo.streams import samples as S
    from streamgrpo.streams import window_core as W
    from streamgrpo.streams.advantages import build_estimator
    from streamgrpo.streams.fanout import FanoutPolicy, fan_out

    task = R.Task(envelope=R.Envelope.new("bench", task_id=ids.derived_id("task", row.metadata.get("row_id", row.question))),
                  question=row.question, source=row.source, group_size=args.group_size,
                  ground_truths=list(row.ground_truths), metadata=dict(row.metadata))
    events: list[Any] = []
    run_group(fan_out(task, 0, FanoutPolicy("planner", args.max_turns, sampling, 1 << 30, 1 << 30, 0)),
              ctx, events.append)
    turns: dict[str, list[Any]] = {}
    state: Any = None
    for ev in events:
        if isinstance(ev, R.PlannerAction):
            turns.setdefault(str(ev.envelope.rollout_id), []).append(ev)
        elif isinstance(ev, R.RolloutCompleted):
            state = state or W.new_state(str(ev.envelope.group_id), task.envelope.task_id, args.group_size, 0.0, 0)
            state = W.add_completed(state, ev)
            out = decide_reward(task, ev, router.scorer_for(task.source))
            state, _ = W.add_reward(state, out.reward if isinstance(out, Reject) else out)
    if state is None:
        return []
    state, _ = W.maybe_close(state, W.WindowPolicy("grpo", build_estimator("grpo"), 1e9, "drop", 2), 0.0)
    have = {(r, int(t.envelope.turn or 0)) for r, ts in turns.items() for t in ts}
    return [S.build_sample(state, r, turns[r]) for r in S.ready_rollouts(state, lambda r, t: (r, t) in have)]


def run_mode(args: argparse.Namespace) -> dict[str, Any]:
    """``args.steps`` optimizer steps of mode ``args.mode`` on the samples in ``args.samples_file``."""
    import torch

    from streamgrpo.trainer.batching import build_batch, micro_batches
    from streamgrpo.trainer.config import TrainerConfig
    from streamgrpo.trainer.losses import build_loss
    from streamgrpo.trainer.model import load_policy
    from streamgrpo.trainer.precision import compute_dtype
    from streamgrpo.trainer.step import StepConfig, build_optimizer, optimizer_step

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = TrainerConfig(base_model=args.model, device="cpu", **MODES[args.mode])
    samples = read_samples(Path(args.samples_file))
    model = load_policy(cfg.model_spec())
    pad = int(model.get_base_model().config.pad_token_id or 0)
    batch = build_batch(samples, max_seq_len=cfg.max_seq_len, normalisation=cfg.normalisation,
                        max_tokens=cfg.max_tokens, pad_id=pad, temperature=cfg.temperature)
    micro = micro_batches(batch, cfg.micro_batch_tokens, cfg.share_prefix)
    optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay)
    step_cfg = StepConfig(loss=build_loss(cfg.loss), loss_config=cfg.loss_config(), max_grad_norm=cfg.max_grad_norm,
                          share_prefix=cfg.share_prefix)
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times, metrics = [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        metrics.append(optimizer_step(model, optimizer, None, micro, step_cfg))
        times.append(time.perf_counter() - start)
    row_tokens = int(batch.attention_mask.sum())
    first = metrics[0]
    return {
        "mode": args.mode, "settings": MODES[args.mode] or "TrainerConfig defaults",
        "compute_dtype": str(compute_dtype(model)).removeprefix("torch."),
        "s_per_step": round(statistics.median(times), 2), "step_s": [round(t, 2) for t in times],
        "trainer_tokens_per_s": round(row_tokens / statistics.median(times), 1),
        "rows": int(batch.input_ids.shape[0]), "row_tokens": row_tokens, "action_tokens": int(batch.action_mask.sum()),
        "padded_tokens": sum(m.padded_tokens for m in micro), "micro_batches": len(micro),
        "computed_tokens": sum(_computed_tokens(m) for m in micro) if cfg.share_prefix else
        sum(m.padded_tokens for m in micro),
        "peak_rss_mb_after_load": round(rss_loaded),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "step1": {k: round(v, 6) for k, v in first.items() if not k.startswith("lr")},
        "loss_per_step": [round(m["loss"], 6) for m in metrics],
    }


def _computed_tokens(mb: Any) -> int:
    """Tokens the shared-prefix forward runs for micro-batch ``mb`` (its prefix tree; leaf padding excluded)."""
    from streamgrpo.trainer import prefix

    lengths = [int(n) for n in mb.attention_mask.sum(dim=1).tolist()]
    needed = mb.action_mask[:, 1:]
    limits = [int(needed[i].nonzero()[0]) for i in range(len(lengths))]
    seqs = [mb.input_ids[i, :n].tolist() for i, n in enumerate(lengths)]
    return prefix.plan(seqs, limits).computed_tokens(lengths)


def _spawn(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def table(results: dict[str, dict[str, Any]]) -> str:
    base = results[BASELINE]
    cols = list(results)
    rows = [
        ("s per step (median)", lambda r: r["s_per_step"]),
        ("trainer tokens/s", lambda r: r["trainer_tokens_per_s"]),
        ("speed-up vs fp32_before", lambda r: round(base["s_per_step"] / r["s_per_step"], 2)),
        ("compute dtype", lambda r: r["compute_dtype"]),
        ("tokens run through the model / in the rows", lambda r: f"{r['computed_tokens']} / {r['row_tokens']}"),
        ("micro-batches", lambda r: r["micro_batches"]),
        ("peak RSS MB", lambda r: r["peak_rss_mb"]),
        ("step-1 loss", lambda r: r["step1"]["loss"]),
        ("step-1 loss - fp32_before", lambda r: f"{r['step1']['loss'] - base['step1']['loss']:+.2e}"),
        ("step-1 clip fraction", lambda r: r["step1"]["clip_frac"]),
        ("step-1 grad norm", lambda r: r["step1"]["grad_norm"]),
        ("step-1 mean / max abs(logp - behaviour)",
         lambda r: f"{r['step1']['abs_log_ratio_v0']:.4f} / {r['step1']['max_abs_log_ratio_v0']:.4f}"),
        ("step-1 TIS weight mean / truncated", lambda r: f"{r['step1']['is_weight_mean']:.4f} / "
                                                         f"{r['step1']['tis_truncated_frac']:.4f}"),
    ]
    lines = ["| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    lines += [f"| {name} | " + " | ".join(str(get(results[c])) for c in cols) + " |" for name, get in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=8, help="TrainingSamples per optimizer step (samples_per_step)")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--policy-dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                    help="dtype of the rollout policy that samples (its logprobs are the behaviour logprobs); auto: "
                         "the rollout worker's default rule (bfloat16 only on AMX CPUs and bf16 GPUs)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--constrain", choices=["auto", "on", "off"], default="off",
                    help="grammar-constrained sampling of the generated samples (the rollout worker's default is auto)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    ap.add_argument("--samples-file", default=None, help="reuse samples written by an earlier run (Avro, base64 lines)")
    ap.add_argument("--mode", choices=list(MODES), default=None, help="run one mode in this process (internal)")
    ap.add_argument("--generate-only", default=None, help="write the samples to this file and stop (internal)")
    args = ap.parse_args()
    if args.generate_only:
        print(json.dumps(generate(args, Path(args.generate_only))))
        return
    if args.mode is not None:
        print(json.dumps(run_mode(args)))
        return
    own = ["--model", args.model, "--steps", str(args.steps), "--threads", str(args.threads)]
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        path = args.samples_file or str(Path(tmp) / "samples.jsonl")
        data: dict[str, Any] = {"samples_file": args.samples_file} if args.samples_file else {}
        if not args.samples_file:
            print("[bench_trainer_step] generating samples ...", file=sys.stderr, flush=True)
            data = _spawn([a for a in sys.argv[1:] if a != "--samples-file"] + ["--generate-only", path])
        results = {}
        for mode in dict.fromkeys([BASELINE, *args.modes]):
            print(f"[bench_trainer_step] {mode} ...", file=sys.stderr, flush=True)
            results[mode] = _spawn([*own, "--samples-file", path, "--mode", mode])
    best = max((m for m in results if m != BASELINE), key=lambda m: results[BASELINE]["s_per_step"]
               / results[m]["s_per_step"], default=BASELINE)
    print(json.dumps({
        "bench": "trainer_step", "host": platform.node(), "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
        "model": args.model, "steps": args.steps, "threads": args.threads, "data": data,
        "speedup_defaults_vs_fp32_before": round(results[BASELINE]["s_per_step"] / results["defaults"]["s_per_step"], 2)
        if "defaults" in results else None,
        "fastest": best, "modes": results, "table": table(results),
    }, indent=2))


if __name__ == "__main__":
    main()
