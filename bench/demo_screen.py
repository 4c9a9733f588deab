"""In-process screen of the warm start from demonstrations, on the product's parts (no Kafka).

    python bench/demo_screen.py --epochs 2 --batch 8 --lr 2e-4 --per-kind 0 --out demo_screen.jsonl

The built-in expert's demonstrations (``tasks/demos.py``, training split only) are executed through the real loop
and tools (``rollout/demonstration.py``: the steps given, the observations real), judged by the default judge and
vetted as the judge service does, turned into TrainingSamples by the window's pure core, and trained by the
trainer's own step (likelihood of the demonstrated action tokens, the grammar mask replayed) for ``--epochs``
passes in batches of ``--batch`` samples. Then the base and the adapter are evaluated greedily on the full held-out
split (``streamgrpo eval``'s runner), with the paired change and its 95 % CI, per kind. One JSON line per phase.
Accuracies do not depend on the machine's load; wall times do (say what ran beside it).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch


def _execute(demos, ctx, policy, a):  # noqa: ANN001, ANN202 - bench script
    from streamgrpo.avro import records as R
    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.judge.decide import Reject, decide_reward
    from streamgrpo.judge.service import Router
    from streamgrpo.rollout.loop import run_groups
    from streamgrpo.streams import samples as S
    from streamgrpo.streams import window_core as W
    from streamgrpo.streams.advantages import build_estimator
    from streamgrpo.streams.fanout import FanoutPolicy, fan_out

    router = Router(JudgeSettings())
    fan = FanoutPolicy("planner", a.max_turns, R.SamplingParams(0.7, 1.0, 48), 1 << 30, 1 << 30, 1)
    wpol = W.WindowPolicy("grpo", build_estimator("grpo"), timeout_s=1e9, partial_policy="drop", min_group_size=1)
    tasks = [R.Task(envelope=R.Envelope.new("screen", task_id=f"demo-{i}"), question=d.task.question,
                    source=d.task.source, group_size=8, ground_truths=list(d.task.ground_truths),
                    metadata=dict(d.task.metadata), demonstration=R.Demonstration(list(d.steps), d.demo_source))
             for i, d in enumerate(demos)]
    events: list[R.Event] = []
    run_groups([fan_out(t, 0, fan) for t in tasks], ctx, events.append)
    by_id = {t.envelope.task_id: t for t in tasks}
    turns: dict[str, list[R.PlannerAction]] = {}
    samples, rejected = [], {}
    for ev in events:
        if isinstance(ev, R.PlannerAction):
            turns.setdefault(str(ev.envelope.rollout_id), []).append(ev)
    for ev in events:
        if not isinstance(ev, R.RolloutCompleted):
            continue
        task = by_id[str(ev.envelope.task_id)]
        out = decide_reward(task, ev, router.scorer_for(task.source))
        if isinstance(out, Reject):
            rejected[out.reason_code] = rejected.get(out.reason_code, 0) + 1
            continue
        st = W.add_completed(W.new_state(str(ev.envelope.group_id), task.envelope.task_id, 1, 0.0, 0), ev)
        st, _ = W.add_reward(st, out)
        st, _ = W.maybe_close(st, wpol, 0.0)
        rid = str(ev.envelope.rollout_id)
        if st.trains:
            samples.append((task.metadata.get("kind"), S.build_sample(st, rid, turns[rid])))
    return samples, rejected


def _train(samples, model, replay, pad_id, a, log):  # noqa: ANN001, ANN202 - bench script
    from streamgrpo.trainer.batching import build_batch, micro_batches
    from streamgrpo.trainer.losses import LossConfig, build_loss
    from streamgrpo.trainer.step import StepConfig, build_optimizer, optimizer_step

    opt = build_optimizer(model, a.lr)
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(eps_low=0.2, eps_high=0.28), max_grad_norm=1.0)
    rng = random.Random(a.seed)
    t0, step = time.monotonic(), 0
    for epoch in range(a.epochs):
        order = list(samples)
        rng.shuffle(order)
        for i in range(0, len(order), a.batch):
            chunk = [s for _, s in order[i:i + a.batch]]
            batch = build_batch(chunk, max_seq_len=2048, normalisation="rollout_mean", max_tokens=512,
                                pad_id=pad_id, temperature=0.7, replay=replay)
            m = optimizer_step(model, opt, None, micro_batches(batch, a.micro_tokens, True), cfg)
            step += 1
            if step % a.log_every == 0:
                log({"kind": "train", "epoch": epoch, "step": step, "loss": round(m["loss"], 4),
                     "wall": round(time.monotonic() - t0, 1)})
    return step, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--per-kind", type=int, default=0, help="demonstrations per kind (0: all)")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--micro-tokens", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-base-eval", action="store_true")
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--precision", default="auto", help="trainer compute precision: auto, bf16 or fp32")
    ap.add_argument("--out", default="demo_screen.jsonl")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    from streamgrpo.evaluation.core import paired_difference
    from streamgrpo.evaluation.judging import CorrectnessJudge
    from streamgrpo.evaluation.runner import EvalSpec, evaluate
    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.models.grammar import GrammarReplay
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.tasks.builtin import heldout_tasks
    from streamgrpo.tasks.demos import expert_demos
    from streamgrpo.trainer.model import ModelSpec, load_policy

    out = open(a.out, "a")

    def log(rec: dict) -> None:
        out.write(json.dumps({**rec, "args": vars(a)}) + "\n")
        out.flush()
        print(json.dumps(rec), flush=True)

    policy = build_policy(RolloutConfig(policy="local", keep_resident=2))
    ctx = build_context(RolloutConfig(policy="local", keep_resident=2), policy)
    demos = expert_demos()
    if a.per_kind:
        seen: dict[str, int] = {}
        demos = [d for d in demos if seen.setdefault(d.task.metadata["kind"], 0) < a.per_kind
                 and not seen.__setitem__(d.task.metadata["kind"], seen[d.task.metadata["kind"]] + 1)]
    t0 = time.monotonic()
    samples, rejected = _execute(demos, ctx, policy, a)
    log({"kind": "executed", "demos": len(demos), "samples": len(samples), "rejected": rejected,
         "wall": round(time.monotonic() - t0, 1)})
    model = load_policy(ModelSpec(lora_rank=16, lora_alpha=32, lora_dropout=0.0, device="cpu", precision=a.precision))
    replay = GrammarReplay(policy.tokenizer, int(policy.vocab_size))
    steps, train_s = _train(samples, model, replay, policy.pad_id, a, log)
    log({"kind": "trained", "steps": steps, "train_s": round(train_s, 1)})
    if a.no_eval:
        return
    store = Path(tempfile.mkdtemp(prefix="demo-screen-"))
    model.save_pretrained(str(store / "v1"))
    policy.load_adapter("planner", 1, store / "v1")
    held = heldout_tasks()
    spec = EvalSpec(task_set="builtin:heldout", max_new_tokens=48, max_turns=a.max_turns, batch_size=32)
    judge = CorrectnessJudge(JudgeSettings())
    runs = {}
    for version in ((1,) if a.no_base_eval else (0, 1)):
        run = evaluate(ctx, held, spec, judge, adapter_name="planner", version=version)
        runs[version] = run
        s = run.summary
        log({"kind": "eval", "version": version, "acc": round(s.accuracy, 4), "answered": round(s.answered_rate, 3),
             "tools": round(s.tool_calls_per_task, 2), "per_kind": {k: round(v, 3) for k, v in s.per_kind.items()},
             "eval_s": round(run.seconds, 1)})
    if 0 in runs:
        d = paired_difference(runs[0].outcomes, runs[1].outcomes)
        log({"kind": "paired", "diff": [round(d.mean, 4), round(d.ci_low, 4), round(d.ci_high, 4)]})


if __name__ == "__main__":
    main()
