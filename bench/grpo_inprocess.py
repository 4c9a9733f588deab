"""In-process GRPO experiment on the product's parts, for trying one learning change at a time quickly.

    python bench/grpo_inprocess.py --steps 30 --lr 3e-4 --temperature 0.7 --out runs.jsonl --tag my-try

Rollouts (LocalPolicy, the agent loop with the rollout settings' answer path) on the built-in TRAIN split
-> judge (--judge, default the product's default reward `correct`; `hybrid` with --format-weight) -> GRPO
advantage window -> TrainingSamples -> one trainer step (--loss, --raft-coef; the grammar replayed as the
trainer does) -> the adapter saved and loaded into the policy as the next version (what the services do
through the store and adapter-events, without Kafka). Held-out accuracy (`streamgrpo eval`'s runner, greedy,
correctness only) every --eval-every steps on the first --eval-limit held-out tasks, with the paired
difference to step 0 and its 95 % CI. One JSON line per step / evaluation to stdout and --out. Used for the
screens in docs/learning.md; accuracies do not depend on the machine's load, wall times do.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tasks-per-step", type=int, default=1)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=int, default=32)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--eval-limit", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default="")
    ap.add_argument("--tools", default="calculator,python,knowledge_search")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="grpo_inprocess.jsonl")
    ap.add_argument("--tag", default="")
    ap.add_argument("--judge", default="correct", help="reward: correct (the default) or hybrid")
    ap.add_argument("--format-weight", type=float, default=0.1, help="hybrid only")
    ap.add_argument("--loss", default="grpo", help="trainer objective: grpo, gspo or raft")
    ap.add_argument("--raft-coef", type=float, default=0.0, help="RAFT term mixed into each step")
    ap.add_argument("--estimator", default="grpo", help="advantage estimator: grpo, dr_grpo, rloo")
    ap.add_argument("--answer-in-call", default="forbid", choices=["forbid", "ignore", "accept"])
    ap.add_argument("--no-answer-at-last-turn", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    from streamgrpo.avro import records as R
    from streamgrpo.evaluation.core import paired_difference
    from streamgrpo.evaluation.judging import CorrectnessJudge
    from streamgrpo.evaluation.runner import EvalSpec, evaluate
    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.judge.decide import Reject, decide_reward
    from streamgrpo.judge.service import Router
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.loop import run_groups
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.rollout.tools.config import ToolsSettings
    from streamgrpo.streams import samples as S
    from streamgrpo.streams import window_core as W
    from streamgrpo.streams.advantages import build_estimator
    from streamgrpo.streams.fanout import FanoutPolicy, fan_out
    from streamgrpo.tasks.builtin import heldout_tasks, train_tasks
    from streamgrpo.trainer.batching import build_batch, micro_batches
    from streamgrpo.trainer.losses import LossConfig, build_loss
    from streamgrpo.trainer.model import ModelSpec, load_policy
    from streamgrpo.trainer.step import StepConfig, build_optimizer, optimizer_step

    model = load_policy(ModelSpec(lora_rank=a.rank, lora_alpha=a.alpha, lora_dropout=0.0,
                                  target_modules=tuple(a.targets.split(",")), device="cpu"))
    cfg = RolloutConfig(policy="local", tools=ToolsSettings(enabled=a.tools.split(",")), keep_resident=2,
                        answer_in_call=a.answer_in_call, answer_at_last_turn=not a.no_answer_at_last_turn)
    policy = build_policy(cfg)
    ctx = build_context(cfg, policy)
    js = JudgeSettings()
    js = js.model_copy(update={"hybrid": js.hybrid.model_copy(update={"format_weight": a.format_weight}),
                               "routes": {**js.routes, "builtin": a.judge}})
    router = Router(js)
    judge = CorrectnessJudge(JudgeSettings())
    opt = build_optimizer(model, a.lr)
    step_cfg = StepConfig(loss=build_loss(a.loss), loss_config=LossConfig(eps_low=0.2, eps_high=0.28,
                                                                          raft_coef=a.raft_coef), max_grad_norm=1.0)
    from streamgrpo.models.grammar import GrammarReplay

    replay = GrammarReplay(policy.tokenizer, int(policy.vocab_size))
    kinds = set(a.kinds.split(",")) if a.kinds else None
    train = [r for r in train_tasks() if not kinds or r.metadata["kind"] in kinds]
    held = [r for r in heldout_tasks() if not kinds or r.metadata["kind"] in kinds][: a.eval_limit]
    espec = EvalSpec(task_set="builtin:heldout", max_new_tokens=a.max_new_tokens, max_turns=a.max_turns, batch_size=32)
    fan = FanoutPolicy("planner", a.max_turns, R.SamplingParams(a.temperature, 1.0, a.max_new_tokens), 1 << 30, 1 << 30, 1)
    wpol = W.WindowPolicy(a.estimator, build_estimator(a.estimator), timeout_s=1e9, partial_policy="drop",
                          min_group_size=2)
    out = open(a.out, "a")
    store = Path(tempfile.mkdtemp(prefix="learn-store-"))
    version = 0

    def log(rec):
        rec.update(tag=a.tag)
        out.write(json.dumps({**rec, "args": vars(a)}) + "\n")
        out.flush()
        print(json.dumps(rec), flush=True)

    first = []

    def do_eval(step, t0):
        run = evaluate(ctx, held, espec, judge, adapter_name="planner", version=version)
        s = run.summary
        first.extend([] if first else run.outcomes)
        diff = paired_difference(first, run.outcomes)
        log({"kind": "eval", "step": step, "version": version, "wall": round(time.monotonic() - t0, 1),
             "acc": round(s.accuracy, 4), "ci": [round(s.ci_low, 3), round(s.ci_high, 3)],
             "answered": round(s.answered_rate, 3), "parse_fail": round(s.parse_failure_rate, 3),
             "tools": round(s.tool_calls_per_task, 2), "turns": round(s.mean_turns, 2),
             "per_kind": {k: round(v, 3) for k, v in s.per_kind.items()}, "eval_s": round(run.seconds, 1),
             "diff_vs_step0": [round(diff.mean, 4), round(diff.ci_low, 4), round(diff.ci_high, 4)]})

    t0 = time.monotonic()
    do_eval(0, t0)
    rng = random.Random(a.seed)
    for step in range(1, a.steps + 1):
        ts = time.monotonic()
        rows = rng.sample(train, a.tasks_per_step)
        tasks = [R.Task(envelope=R.Envelope.new("exp", task_id=f"t{step}-{i}-{a.seed}"), question=r.question,
                        source=r.source, group_size=a.group, ground_truths=list(r.ground_truths),
                        metadata=dict(r.metadata)) for i, r in enumerate(rows)]
        events = []
        with policy.pinned("planner", version):
            run_groups([fan_out(t, version, fan) for t in tasks], ctx, events.append)
        gen_s = time.monotonic() - ts
        by_id = {t.envelope.task_id: t for t in tasks}
        turns, states, rewards, correct = {}, {}, [], []
        for ev in events:
            if isinstance(ev, R.PlannerAction):
                turns.setdefault(ev.envelope.rollout_id, []).append(ev)
            elif isinstance(ev, R.RolloutCompleted):
                task = by_id[ev.envelope.task_id]
                g = ev.envelope.group_id
                st = states.get(g) or W.new_state(g, task.envelope.task_id, task.group_size, 0.0, 0)
                st = W.add_completed(st, ev)
                o = decide_reward(task, ev, router.scorer_for(task.source))
                reward = o.reward if isinstance(o, Reject) else o
                rewards.append(float(reward.score))
                correct.append(judge.correct(task.source, task.question, ev.final_answer, list(task.ground_truths)))
                states[g], _ = W.add_reward(st, reward)
        samples = []
        have = {(r, int(t.envelope.turn or 0)) for r, tt in turns.items() for t in tt}
        for st in states.values():
            st, _ = W.maybe_close(st, wpol, 0.0)
            for rid in S.ready_rollouts(st, lambda r, t, seen=have: (r, t) in seen):
                samples.append(S.build_sample(st, rid, turns[rid]))
        tt0 = time.monotonic()
        metrics = {}
        if samples:
            batch = build_batch(samples, max_seq_len=2048, normalisation="rollout_mean", max_tokens=512,
                                pad_id=policy.pad_id, temperature=a.temperature, replay=replay)
            metrics = optimizer_step(model, opt, None, micro_batches(batch, 4096, True), step_cfg)
            version += 1
            path = store / f"v{version}"
            model.save_pretrained(str(path))
            policy.load_adapter("planner", version, path)
        train_s = time.monotonic() - tt0
        pa = [e for e in events if isinstance(e, R.PlannerAction)]
        log({"kind": "step", "step": step, "version": version, "wall": round(time.monotonic() - t0, 1),
             "reward": round(sum(rewards) / len(rewards), 3), "train_correct": round(sum(correct) / len(correct), 3),
             "samples": len(samples), "kinds": [r.metadata.get("kind") for r in rows], "parse_fail": round(sum(e.parse_status is R.ParseStatus.FAILED for e in pa) / max(1, len(pa)), 3),
             "gen_s": round(gen_s, 1), "train_s": round(train_s, 1), "loss": round(metrics.get("loss", 0), 5),
             "clip": round(metrics.get("clip_frac", 0), 3), "prompt_tok": round(sum(len(e.prompt_token_ids) for e in pa) / max(1, len(pa))),
             "act_tok": round(sum(len(e.action_token_ids) for e in pa) / max(1, len(pa)), 1)})
        if step % a.eval_every == 0:
            do_eval(step, t0)
    shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
