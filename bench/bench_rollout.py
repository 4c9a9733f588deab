"""Rollouts/s of ONE rollout worker on the built-in tasks, over a real broker. Prints JSON.

Publishes ``--groups`` groups of ``--group-size`` RolloutRequests (built-in tasks spread over the
four kinds), runs one in-process :class:`RolloutWorker` until it completed them all, and reports
rollouts/s (wall time from the worker's start, model already loaded), statuses, turns, planner
parse statuses and tokens per action, read back from the topics.

    python bench/bench_rollout.py --groups 4 --group-size 4 --max-turns 2 --max-new-tokens 48

Both modes run in the same process on the same requests and seed (paired): planner replies stopped
where their JSON object closes (the default) and replies run to EOS / ``max_new_tokens`` (before).
Several ``--concurrency`` values (groups one worker runs at once) run the same requests one after the
other in the same process, e.g. the default against twice as many groups in one decode batch::

    python bench/bench_rollout.py --groups 8 --max-turns 4 --max-new-tokens 64 --concurrency 2 4 --modes stop_at_json_end
    python bench/bench_rollout.py --bootstrap 127.0.0.1:9092   # your broker instead of embedded Tansu

What is covered: one worker, model-free roles by default (the training setup on CPU), base model
(adapter v0). What is not: several workers, vLLM, adapter hot swaps during the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.rollout.config import ASK_MODEL_MODES, RolloutConfig
from streamgrpo.rollout.runtime import build_context, build_policy
from streamgrpo.rollout.worker import RolloutWorker
from streamgrpo.tasks.builtin import builtin_tasks
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer


def requests_for(groups: int, size: int, max_turns: int, max_new_tokens: int, seed: int | None
                 ) -> list[R.RolloutRequest]:
    tasks = builtin_tasks()
    picked = [tasks[i * len(tasks) // groups] for i in range(groups)]
    sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed)
    out = []
    for task in picked:
        task_id, group_id = str(uuid.uuid4()), str(uuid.uuid4())
        for i in range(size):
            env = R.Envelope.new("bench", task_id=task_id, group_id=group_id, rollout_id=str(uuid.uuid4()))
            out.append(R.RolloutRequest(envelope=env, question=task.question, source=task.source, rollout_index=i,
                                        group_size=size, adapter_name="planner", adapter_version=0,
                                        max_turns=max_turns, sampling=sampling, metadata=dict(task.metadata)))
    return out


def run_mode(kafka: KafkaSettings, cfg: RolloutConfig, requests: list[R.RolloutRequest]) -> dict[str, object]:
    """Publish ``requests`` under ``kafka``'s prefix, run one worker until they are done, read back."""
    ensure(kafka)
    with EventProducer(kafka, "bench") as prod:
        for r in requests:
            prod.send(r)
    t_load = time.perf_counter()
    policy = build_policy(cfg)
    ctx = build_context(cfg, policy)
    load_s = time.perf_counter() - t_load
    producer = EventProducer(kafka, cfg.service)
    worker = RolloutWorker(cfg, kafka, ctx, producer)
    start = time.perf_counter()
    stats = asyncio.run(worker.run(asyncio.Event(), max_rollouts=len(requests)))
    wall = time.perf_counter() - start
    producer.close()
    actions = [r.event for r in read_topic(kafka, "planner-actions", timeout_s=20)]
    done = [r.event for r in read_topic(kafka, "rollouts", timeout_s=20)]
    return {
        "model_load_s": round(load_s, 2), "wall_s": round(wall, 2), "rollouts": stats.rollouts,
        "rollouts_per_s": round(stats.rollouts / wall, 4),
        "planner_calls": len(actions), "planner_actions_per_s": round(len(actions) / wall, 4),
        "tokens_per_action": round(sum(len(a.action_token_ids) for a in actions) / max(1, len(actions)), 1),
        "parse_status": dict(Counter(a.parse_status.value for a in actions)),
        "statuses": dict(Counter(d.status.value for d in done)),
        "mean_turns": round(sum(d.turns for d in done) / max(1, len(done)), 2),
    }


MODES = {"stop_at_json_end": True, "run_to_eos_or_max": False}


def table(results: dict[str, dict[str, object]]) -> str:
    keys = ["rollouts_per_s", "planner_actions_per_s", "tokens_per_action", "wall_s", "mean_turns",
            "parse_status", "statuses"]
    lines = ["| metric | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(str(results[m][k]) for m in results) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", default=None, help="a running broker (default: start an embedded Tansu)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1],
                    help="groups the worker runs at once; several values run one after the other (columns MODE/cN)")
    ap.add_argument("--roles", choices=["model-free", "model"], default="model-free")
    ap.add_argument("--seed", type=int, default=1234, help="sampling seed shared by both modes (paired runs)")
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES),
                    help="stop a planner reply at the end of its JSON object, or run it to EOS / max tokens")
    args = ap.parse_args()

    results: dict[str, dict[str, object]] = {}
    with ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from streamgrpo.topics.broker import EmbeddedBroker

            broker = stack.enter_context(EmbeddedBroker(Path(tempfile.mkdtemp(prefix="bench-rollout-"))))
            bootstrap = broker.bootstrap
        modes = ASK_MODEL_MODES if args.roles == "model" else {}
        requests = requests_for(args.groups, args.group_size, args.max_turns, args.max_new_tokens, args.seed)
        for concurrency in args.concurrency:
            for mode in args.modes:
                kafka = KafkaSettings(bootstrap=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.")
                cfg = RolloutConfig(model=args.model, concurrency=concurrency, max_turns=args.max_turns,
                                    follow_adapters=False, stop_at_json_end=MODES[mode],
                                    tools={"enabled": ["calculator", "python", "knowledge_search"]}, **modes)
                name = mode if len(args.concurrency) == 1 else f"{mode}/c{concurrency}"
                print(f"[bench_rollout] {name} ...", file=sys.stderr, flush=True)
                results[name] = run_mode(kafka, cfg, requests)
    out: dict[str, object] = {
        "bench": "rollout_worker", "host": platform.node(), "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0], "model": args.model, "roles": args.roles,
        "groups": args.groups, "group_size": args.group_size, "max_turns": args.max_turns,
        "max_new_tokens": args.max_new_tokens,
        "concurrency": args.concurrency[0] if len(args.concurrency) == 1 else args.concurrency, "seed": args.seed,
        **results,
    }
    if len(args.concurrency) == 1 and len(results) == 2:
        a, b = (results[m] for m in MODES)
        out["speedup_rollouts_per_s"] = round(float(a["rollouts_per_s"]) / max(1e-9, float(b["rollouts_per_s"])), 2)
    if len(args.concurrency) > 1:  # each concurrency against the first, per mode
        first = args.concurrency[0]
        for mode in args.modes:
            for c in args.concurrency[1:]:
                out[f"speedup_{mode}_c{c}_vs_c{first}"] = round(
                    float(results[f"{mode}/c{c}"]["rollouts_per_s"]) /
                    max(1e-9, float(results[f"{mode}/c{first}"]["rollouts_per_s"])), 2)
    if len(results) > 1:
        out["table"] = table(results)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
