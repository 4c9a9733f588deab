"""The streamgrpo side of ``bench_trl.py``: the real components, in-process, without Kafka.

Per optimizer step: ``tasks_per_step`` tasks -> N RolloutRequests each (``streams.fanout.fan_out``)
-> ``rollout.loop.run_group`` on a :class:`~streamgrpo.inference.local.LocalPolicy` (model-free
executor/verifier, ``max_turns=2``, T=1.0, top_p=1.0, ``max_new_tokens=completion_len``) -> the
``builtin`` judge on every RolloutCompleted (``judge.decide.decide_reward``) -> the advantage
window (``streams.window_core``, GRPO estimator) -> TrainingSamples (``streams.samples.build_sample``,
every planner turn, the trajectory's advantage) -> one ``trainer.step.optimizer_step`` on the
trainer's own LoRA model -> ``trainer.adapter_store.write_version`` -> ``policy.load_adapter`` as the
next version, so the next step's rollouts are on-policy (what the streaming system does through the
store and ``adapter-events``).

Measured: seconds per optimizer step (rollout + judge + train + publish), generation seconds and
generated (action) tokens/s, trainer seconds and trainer tokens/s (non-pad tokens of the trained
rows: prompt + action), mean reward per step. A step whose groups all have zero reward variance
trains nothing (as in the streaming system: such groups yield no samples); it is counted in
``train_skipped``.

Not covered: Kafka, Avro encoding, concurrency between rollout and training (here they alternate).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ADAPTER = "planner"


def _task_event(row: Any, group: int) -> Any:
    from streamgrpo.avro import ids
    from streamgrpo.avro import records as R

    task_id = ids.derived_id("task", row.metadata.get("row_id", row.question))
    return R.Task(envelope=R.Envelope.new("bench", task_id=task_id), question=row.question, source=row.source,
                  group_size=group, ground_truths=list(row.ground_truths), metadata=dict(row.metadata))


def _build(completion_len: int, lora: dict[str, Any], seed: int, judge: Any = None) -> dict[str, Any]:
    """Policy + loop context (rollout side), trainer model (trainer side), judge router."""
    import torch

    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.judge.service import Router
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.trainer.model import ModelSpec, load_policy

    torch.manual_seed(seed)
    cfg = RolloutConfig(policy="local", device="cpu", dtype="float32", executor_mode="passthrough",
                        verifier_mode="rule", analysis_mode="rule", synthesiser_mode="passthrough",
                        max_turns=2, max_new_tokens=completion_len, temperature=1.0, top_p=1.0)
    policy = build_policy(cfg)
    ctx = build_context(cfg, policy)
    spec = ModelSpec(lora_rank=lora["r"], lora_alpha=lora["lora_alpha"], lora_dropout=lora["lora_dropout"],
                     target_modules=tuple(lora["target_modules"]), device="cpu")
    router = judge if judge is not None and hasattr(judge, "scorer_for") else Router(JudgeSettings())
    return {"policy": policy, "ctx": ctx, "model": load_policy(spec), "router": router}


def _rollouts(tasks: Sequence[Any], version: int, completion_len: int, b: dict[str, Any]) -> tuple[list[Any], float]:
    """Run every task's group on ``version``; returns (events, generation seconds)."""
    from streamgrpo.avro import records as R
    from streamgrpo.rollout.loop import run_group
    from streamgrpo.streams.fanout import FanoutPolicy, fan_out

    fan = FanoutPolicy(ADAPTER, 2, R.SamplingParams(1.0, 1.0, completion_len), 1 << 30, 1 << 30, 0)
    events: list[Any] = []
    policy = b["policy"]
    gen_s = [0.0]
    inner = policy.generate

    def timed(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            gen_s[0] += time.perf_counter() - t

    policy.generate = timed  # instance attribute: counts only planner sampling
    try:
        for task in tasks:
            run_group(fan_out(task, version, fan), b["ctx"], events.append)
    finally:
        del policy.generate
    return events, gen_s[0]


def _samples(tasks: Sequence[Any], events: Sequence[Any], router: Any) -> tuple[list[Any], list[float]]:
    """Judge every rollout, close each group's window, assemble its TrainingSamples."""
    from streamgrpo.avro import records as R
    from streamgrpo.judge.decide import Reject, decide_reward
    from streamgrpo.streams import samples as S
    from streamgrpo.streams import window_core as W
    from streamgrpo.streams.advantages import build_estimator

    wpol = W.WindowPolicy("grpo", build_estimator("grpo"), timeout_s=1e9, partial_policy="drop", min_group_size=2)
    by_id = {t.envelope.task_id: t for t in tasks}
    turns: dict[str, list[R.PlannerAction]] = {}
    states: dict[str, W.GroupState] = {}
    rewards: list[float] = []
    for ev in events:
        if isinstance(ev, R.PlannerAction):
            turns.setdefault(ev.envelope.rollout_id, []).append(ev)
        elif isinstance(ev, R.RolloutCompleted):
            task = by_id[ev.envelope.task_id]
            g = ev.envelope.group_id
            state = states.get(g) or W.new_state(g, task.envelope.task_id, task.group_size, 0.0, 0)
            state = W.add_completed(state, ev)
            out = decide_reward(task, ev, router.scorer_for(task.source))
            reward = out.reward if isinstance(out, Reject) else out
            rewards.append(float(reward.score))
            states[g], _ = W.add_reward(state, reward)
    out_samples = []
    have = {(r, t.envelope.turn) for r, ts in turns.items() for t in ts}
    for state in states.values():
        state, _closed = W.maybe_close(state, wpol, 0.0)
        for rid in S.ready_rollouts(state, lambda r, t: (r, t) in have):  # noqa: B023 (called right here)
            out_samples.append(S.build_sample(state, rid, turns[rid]))
    return out_samples, rewards


def _train(samples: list[Any], version: int, b: dict[str, Any], opt: Any, step_cfg: Any, store: Path,
           ) -> tuple[float, int, dict[str, float]]:
    """One optimizer step + publish + load as ``version + 1``; returns (trainer s, tokens, metrics)."""
    from streamgrpo.models import adapter_store
    from streamgrpo.trainer.batching import build_batch, micro_batches
    from streamgrpo.trainer.step import optimizer_step

    t = time.perf_counter()
    batch = build_batch(samples, max_seq_len=2048, normalisation="rollout_mean", max_tokens=512,
                        pad_id=b["policy"].pad_id)
    metrics = optimizer_step(b["model"], opt, None, micro_batches(batch, 4096), step_cfg)
    train_s = time.perf_counter() - t
    manifest = adapter_store.Manifest(ADAPTER, version + 1, version or None, "smollm2-135m-instruct", version + 1,
                                      metrics={k: float(v) for k, v in metrics.items()})
    path, sha = adapter_store.write_version(store, manifest, b["model"])
    b["policy"].load_adapter(ADAPTER, version + 1, adapter_store.verify_and_load_path(str(path), sha))
    return train_s, int(batch.attention_mask.sum()), metrics


def run(k_steps: int, group: int, tasks_per_step: int, completion_len: int, lr: float, lora: dict[str, Any],
        seed: int, tasks: Sequence[Any], reward: Any = None) -> dict[str, Any]:
    """K optimizer steps of streamgrpo's loop; ``tasks`` are TaskRows (``k_steps * tasks_per_step``).

    ``reward``: an object with ``scorer_for(source)`` (the TRL side's ``BuiltinJudge``, so both sides use
    one scorer), else a fresh ``judge.service.Router(JudgeSettings())``; scored through the judge's own
    ``decide_reward``.
    """
    from streamgrpo.avro import records as R
    from streamgrpo.trainer.losses import LossConfig, build_loss
    from streamgrpo.trainer.step import StepConfig, build_optimizer

    t0 = time.perf_counter()
    b = _build(completion_len, lora, seed, reward)
    setup_s = time.perf_counter() - t0
    opt = build_optimizer(b["model"], lr)
    step_cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(eps_low=0.2, eps_high=0.2, kl_coef=0.0),
                          temperature=1.0, max_grad_norm=1.0)
    store = Path(tempfile.mkdtemp(prefix="bench-trl-store-"))
    version, per_step, gen_s, gen_tok, train_s, train_tok, rewards, skipped, rows = 0, [], 0.0, 0, 0.0, 0, [], 0, 0
    prompt_tok = 0
    for k in range(k_steps):
        t = time.perf_counter()
        chunk = [_task_event(r, group) for r in tasks[k * tasks_per_step:(k + 1) * tasks_per_step]]
        events, g_s = _rollouts(chunk, version, completion_len, b)
        gen_s += g_s
        actions = [e for e in events if isinstance(e, R.PlannerAction)]
        gen_tok += sum(len(e.action_token_ids) for e in actions)
        prompt_tok += sum(len(e.prompt_token_ids) for e in actions)  # prefilled by the sampler
        samples, step_rewards = _samples(chunk, events, b["router"])
        rewards.append(sum(step_rewards) / max(1, len(step_rewards)))
        if samples:
            s, tok, _m = _train(samples, version, b, opt, step_cfg, store)
            train_s, train_tok, version = train_s + s, train_tok + tok, version + 1
            rows += sum(len(x.turns) for x in samples)
        else:
            skipped += 1
        per_step.append(time.perf_counter() - t)
    shutil.rmtree(store, ignore_errors=True)
    return {
        "steps": k_steps, "s_per_step": sum(per_step) / max(1, k_steps), "total_s": sum(per_step),
        "setup_s": setup_s, "generation_s": gen_s, "generated_tokens": gen_tok, "prompt_tokens": prompt_tok,
        "generated_tokens_per_s": gen_tok / max(1e-9, gen_s), "trainer_s": train_s, "trainer_tokens": train_tok,
        "trainer_tokens_per_s": (train_tok / train_s) if train_s else None, "trained_rows": rows,
        "train_skipped": skipped, "adapter_versions": version,
        "reward_per_step": [round(r, 4) for r in rewards],
        "reward_last2": sum(rewards[-2:]) / max(1, len(rewards[-2:])),
    }
