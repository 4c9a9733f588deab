"""Rollouts/s of ONE rollout worker on the built-in tasks, over a real broker. Prints JSON.

Publishes ``--groups`` groups of ``--group-size`` RolloutRequests (built-in tasks spread over the
four kinds), runs one in-process :class:`RolloutWorker` until it completed them all, and reports
rollouts/s (wall time from the worker's start, model already loaded), statuses, turns, planner
parse statuses and tokens per action, read back from the topics.

    python bench/bench_rollout.py --groups 4 --group-size 4 --max-turns 2 --max-new-tokens 48
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
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.builtin_tasks import builtin_tasks
from streamgrpo.topics.consumer import read_topic
from streamgrpo.topics.producer import EventProducer


def requests_for(groups: int, size: int, max_turns: int, max_new_tokens: int) -> list[R.RolloutRequest]:
    tasks = builtin_tasks()
    picked = [tasks[i * len(tasks) // groups] for i in range(groups)]
    sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens)
    out = []
    for task in picked:
        task_id, group_id = str(uuid.uuid4()), str(uuid.uuid4())
        for i in range(size):
            env = R.Envelope.new("bench", task_id=task_id, group_id=group_id, rollout_id=str(uuid.uuid4()))
            out.append(R.RolloutRequest(envelope=env, question=task.question, source=task.source, rollout_index=i,
                                        group_size=size, adapter_name="planner", adapter_version=0,
                                        max_turns=max_turns, sampling=sampling, metadata=dict(task.metadata)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--roles", choices=["model-free", "model"], default="model-free")
    args = ap.parse_args()

    with ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from streamgrpo.topics.broker import EmbeddedBroker

            broker = stack.enter_context(EmbeddedBroker(Path(tempfile.mkdtemp(prefix="bench-rollout-"))))
            bootstrap = broker.bootstrap
        kafka = KafkaSettings(bootstrap=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.")
        ensure(kafka)
        modes = ASK_MODEL_MODES if args.roles == "model" else {}
        cfg = RolloutConfig(model=args.model, concurrency=args.concurrency, max_turns=args.max_turns,
                            follow_adapters=False, tools={"enabled": ["calculator", "python", "knowledge_search"]},
                            **modes)
        requests = requests_for(args.groups, args.group_size, args.max_turns, args.max_new_tokens)
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
    print(json.dumps({
        "bench": "rollout_worker", "host": platform.node(), "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0], "model": args.model, "roles": args.roles,
        "groups": args.groups, "group_size": args.group_size, "max_turns": args.max_turns,
        "max_new_tokens": args.max_new_tokens, "concurrency": args.concurrency,
        "model_load_s": round(load_s, 2), "wall_s": round(wall, 2), "rollouts": stats.rollouts,
        "rollouts_per_s": round(stats.rollouts / wall, 4),
        "planner_calls": len(actions), "planner_actions_per_s": round(len(actions) / wall, 4),
        "tokens_per_action": round(sum(len(a.action_token_ids) for a in actions) / max(1, len(actions)), 1),
        "parse_status": dict(Counter(a.parse_status.value for a in actions)),
        "statuses": dict(Counter(d.status.value for d in done)),
        "mean_turns": round(sum(d.turns for d in done) / max(1, len(done)), 2),
    }, indent=2))


if __name__ == "__main__":
    main()
